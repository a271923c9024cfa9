// Checks of values computed in the graph (ops/checks.h).
#include "ops/checks.h"

#include "ops/op_helpers.h"

namespace lazytrace::ops {

Tensor check_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  trace::OpScope scope;
  check_defined("cross_entropy", targets, "targets");
  ir::Attrs a;
  a.push(classes);
  a.push(ignore_index);
  return trace::make_pending(ir::make_node(ir::OpKind::CheckTargets, targets.dtype(),
                                           targets.shape(), trace::node_of(targets), a));
}

}  // namespace lazytrace::ops
