#include "ir/loop.h"

#include "core/hash.h"
#include "lazytrace/core/error.h"

namespace lazytrace::ir {

std::vector<NodePtr> make_loop(Loop loop, std::vector<NodePtr> operands) {
  const Body& b = *loop.body;
  if (static_cast<int>(operands.size()) != b.num_inputs ||
      loop.roles.size() != static_cast<size_t>(b.num_inputs))
    fail("loop", "body '", b.name, "' takes ", b.num_inputs, " inputs, got ", operands.size(),
         " operands and ", loop.roles.size(), " roles");
  loop.steps.resize(loop.roles.size(), 0);
  // result types: the carries as they are; a scan's ys with the length in front
  loop.result_types.clear();
  const size_t nres = b.results.size();
  for (size_t i = 0; i < nres; ++i) {
    std::vector<int64_t> dims = b.results[i]->shape.vec();
    if (loop.kind == Loop::Kind::Scan && static_cast<int>(i) >= loop.num_carry)
      dims.insert(dims.begin(), loop.length);
    loop.result_types.emplace_back(Shape(dims), b.results[i]->dtype);
  }
  uint64_t h = hash_combine(b.hash, static_cast<uint64_t>(loop.kind) + 1);
  if (loop.cond) h = hash_combine(h, loop.cond->hash);
  h = hash_combine(h, static_cast<uint64_t>(loop.length));
  h = hash_combine(h, static_cast<uint64_t>(loop.reverse) | (uint64_t(loop.num_carry) << 1));
  for (size_t i = 0; i < loop.roles.size(); ++i)
    h = hash_combine(h, static_cast<uint64_t>(loop.roles[i]) * 0x100000001b3ULL +
                            static_cast<uint64_t>(loop.steps[i]));
  loop.hash = h;
  loop.data = b.data;
  loop.scalars = b.scalars;
  if (loop.cond) {
    loop.data.insert(loop.data.end(), loop.cond->data.begin(), loop.cond->data.end());
    loop.scalars.insert(loop.scalars.end(), loop.cond->scalars.begin(), loop.cond->scalars.end());
  }
  Attrs a;
  a.push(static_cast<int64_t>(loop.hash));
  auto shared = std::make_shared<Loop>(std::move(loop));
  NodePtr node = make_node(OpKind::Loop, DType::float32, Shape{}, std::move(operands), a);
  node->payload = std::shared_ptr<const Loop>(shared);
  std::vector<NodePtr> outs;
  outs.reserve(shared->result_types.size());
  for (size_t i = 0; i < shared->result_types.size(); ++i) {
    Attrs r;
    r.push(static_cast<int64_t>(i));
    const auto& [shape, dtype] = shared->result_types[i];
    outs.push_back(make_node(OpKind::CallResult, dtype, shape, node, r));
  }
  node->set_results(outs);
  return outs;
}

}  // namespace lazytrace::ir
