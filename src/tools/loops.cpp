// Recording a loop node, shared by scan and while_loop.
#include "tools/loops.h"

#include "tools/traced_body.h"

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

std::vector<ir::NodePtr> loop_operands(const std::vector<trace::BodyInput>& inputs,
                                       const std::vector<ir::NodePtr>& explicit_nodes,
                                       const std::vector<ir::NodePtr>& lifted_nodes,
                                       const std::pair<ir::NodePtr, ir::NodePtr>& rng) {
  return body_operands(
      inputs, [&](size_t i) { return explicit_nodes[i]; },
      [&](size_t i) { return lifted_nodes[i]; },
      [](size_t) { return ir::make_scalar(0, 0, DType::int64); },  // never read
      rng);
}

std::vector<ir::NodePtr> loop_operands(const std::vector<trace::BodyInput>& inputs,
                                       const std::vector<ir::NodePtr>& explicit_nodes,
                                       const std::vector<Tensor>& lifted,
                                       const std::pair<ir::NodePtr, ir::NodePtr>& rng) {
  std::vector<ir::NodePtr> nodes;
  for (const Tensor& t : lifted) nodes.push_back(trace::node_of(t));
  return loop_operands(inputs, explicit_nodes, nodes, rng);
}

}  // namespace lazytrace::tools
