// Recording a loop node, shared by scan and while_loop.
#include "tools/loops.h"

namespace lazytrace::tools {

using Role = ir::Loop::Role;

std::vector<Tensor> record_loop(ir::Loop loop, std::vector<ir::NodePtr> operands) {
  trace::OpScope scope;
  std::vector<Tensor> outs;
  for (ir::NodePtr& n : ir::make_loop(std::move(loop), std::move(operands)))
    outs.push_back(trace::make_pending(std::move(n)));
  return outs;
}

void assign_roles(ir::Loop& loop, const std::vector<trace::BodyInput>& inputs, int carries, int xs,
                  uint64_t rng_count) {
  loop.roles.clear();
  loop.steps.clear();
  for (const trace::BodyInput& in : inputs) {
    Role r = Role::Unused;
    switch (in.kind) {
      case trace::BodyInput::Explicit:
        r = in.index < carries ? Role::Carry : in.index < carries + xs ? Role::X : Role::Invariant;
        break;
      case trace::BodyInput::Lifted:
      case trace::BodyInput::RngSeed:
        r = Role::Invariant;
        break;
      case trace::BodyInput::RngOffset:
        r = Role::Counter;
        break;
      case trace::BodyInput::Extra:
        break;
    }
    loop.roles.push_back(r);
    loop.steps.push_back(r == Role::Counter ? static_cast<int64_t>(rng_count) : 0);
  }
}

}  // namespace lazytrace::tools
