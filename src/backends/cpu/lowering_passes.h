#pragma once
// The optional passes that lowering (lower.cpp) asks about single nodes, one file each; each
// is a pass of runtime/passes.def, and lowering asks only where it is on.
#include <vector>

#include "ir/graph.h"

namespace lazytrace::cpu {

/** How many operands read each node, and the last node that reads it (the only one where
 * uses is 1); a result counts as a use from outside. */
struct GraphUses {
  std::vector<int> uses, sole_user;
  explicit GraphUses(const ir::Graph& g);
  /** Whether node `i` is read by `reader` alone. */
  bool only_read_by(int i, int reader) const {
    return uses[static_cast<size_t>(i)] == 1 && sole_user[static_cast<size_t>(i)] == reader;
  }
};

/** slices_in_place.cpp (Pass::SlicesInPlace): the stacks (concats along dim 0 of tensors
 * with leading dim 1) that only loops read as xs, which are never made: each iteration
 * reads its part where it lies (scan_layers' weights). One flag per node. */
std::vector<char> stacks_read_in_place(const ir::Graph& g, const GraphUses& u);

/** transposed_products.cpp (Pass::TransposedProducts): whether 2-d product `i` is read only
 * through its transpose, and so is computed transposed, landing in the layout its reader
 * wants. */
bool computed_transposed(const ir::Graph& g, const GraphUses& u, int i);

}  // namespace lazytrace::cpu
