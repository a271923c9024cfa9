#pragma once
// Splitting a traced VJP into what the forward pass can compute and save (residuals) and
// what needs the cotangents, as JAX's partial evaluation does for scan. The backward keeps
// only nodes that depend on a tangent input; a value it reads from the forward part is a
// residual and becomes a new Param, except leaves and layout ops of leaves, which are
// cheap to rebuild in the backward (a broadcast weight is not worth saving).
#include <functional>
#include <vector>

#include "ir/node.h"

namespace lazytrace::ir {

struct Partition {
  std::vector<NodePtr> residuals;  // forward nodes the backward reads, in order
  std::vector<NodePtr> roots;      // the backward: `roots` with residual i as Param(first + i)
};

/** Partitions the graph of `roots`; `is_tangent` says which leaves carry cotangents. */
Partition partition(const std::vector<NodePtr>& roots,
                    const std::function<bool(const Node&)>& is_tangent, int first_param);

}  // namespace lazytrace::ir
