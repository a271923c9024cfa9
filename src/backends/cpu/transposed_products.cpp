// The transposed_products pass (lowering_passes.h): a 2-d product read only through its
// transpose (a weight's gradient xᵀ dy, which the transpose's VJP turns back into the
// weight's layout) is computed transposed, as dyᵀ x, with no strided copy after.
#include "backends/cpu/lowering_passes.h"

#include "ir/node.h"

namespace lazytrace::cpu {

bool computed_transposed(const ir::Graph& g, const GraphUses& u, int i) {
  const int reader = u.sole_user[static_cast<size_t>(i)];
  if (reader < 0 || !u.only_read_by(i, reader)) return false;  // a result counts as a reader
  const ir::GNode& p = g.nodes[static_cast<size_t>(reader)];
  return ir::is_matrix_transpose(p.op, p.attrs);
}

}  // namespace lazytrace::cpu
