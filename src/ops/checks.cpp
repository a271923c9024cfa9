// Checks of values computed in the graph (ops/checks.h).
#include "ops/checks.h"

#include "ops/op_helpers.h"

namespace lazytrace::ops {

Tensor check_indices(const Tensor& indices, int64_t limit, int64_t ignore_index, IndexCheck who) {
  trace::OpScope scope;
  check_defined(ir::index_check_op(who), indices, "indices");
  ir::Attrs a;
  a.push(limit);
  a.push(ignore_index);
  a.push(static_cast<int64_t>(who));
  return trace::make_pending(ir::make_node(ir::OpKind::CheckTargets, indices.dtype(),
                                           indices.shape(), trace::node_of(indices), a));
}

}  // namespace lazytrace::ops
