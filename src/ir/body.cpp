#include "ir/body.h"

#include "core/hash.h"
#include "lazytrace/core/error.h"

namespace lazytrace::ir {

NodePtr make_param(int index, DType dtype, Shape shape) {
  Attrs a;
  a.push(index);
  return make_node(OpKind::Param, dtype, std::move(shape), a);
}

std::shared_ptr<const Body> make_body(std::vector<NodePtr> results, int num_inputs,
                                      std::string name) {
  auto body = std::make_shared<Body>();
  body->name = std::move(name);
  body->num_inputs = num_inputs;
  std::vector<Node*> roots;
  for (const NodePtr& r : results) roots.push_back(r.get());
  Walk w = walk(roots);
  body->graph = build_graph(w, body->name);
  body->data = w.params;
  body->scalars = w.scalars;
  body->hash = hash_combine(w.key, static_cast<uint64_t>(num_inputs) * 0x9e3779b97f4a7c15ULL);
  body->results = std::move(results);
  return body;
}

std::vector<NodePtr> make_call(const std::shared_ptr<const Body>& body,
                               std::vector<NodePtr> inputs) {
  if (static_cast<int>(inputs.size()) != body->num_inputs)
    fail("call", "body '", body->name, "' takes ", body->num_inputs, " inputs, got ",
         inputs.size());
  Attrs a;
  a.push(static_cast<int64_t>(body->hash));
  NodePtr call = make_node(OpKind::Call, DType::float32, Shape{}, std::move(inputs), a);
  call->data = std::const_pointer_cast<Body>(body);
  std::vector<NodePtr> outs;
  outs.reserve(body->results.size());
  for (size_t i = 0; i < body->results.size(); ++i) {
    Attrs r;
    r.push(static_cast<int64_t>(i));
    const Node& res = *body->results[i];
    outs.push_back(make_node(OpKind::CallResult, res.dtype, res.shape, call, r));
  }
  return outs;
}

}  // namespace lazytrace::ir
