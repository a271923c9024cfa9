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
                                      std::string name, std::vector<int> packed) {
  auto body = std::make_shared<Body>();
  body->name = std::move(name);
  body->num_inputs = num_inputs;
  body->packed = std::move(packed);
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

NodePtr make_pack(std::vector<NodePtr> inputs) {
  return make_node(OpKind::Pack, DType::float32, Shape{}, std::move(inputs));
}

std::vector<NodePtr> make_call(const std::shared_ptr<const Body>& body, std::vector<NodePtr> direct,
                               NodePtr pack, bool inline_call) {
  int num_packed = 0;
  for (int p : body->packed) num_packed += p >= 0;
  if (static_cast<int>(direct.size()) + num_packed != body->num_inputs ||
      (num_packed > 0) != (pack != nullptr) || (pack && pack->num_operands() != num_packed))
    fail("call", "body '", body->name, "' takes ", body->num_inputs, " inputs (", num_packed,
         " packed), got ", direct.size(), " direct and ", pack ? pack->num_operands() : 0,
         " packed");
  if (pack) direct.push_back(std::move(pack));
  Attrs a;
  a.push(static_cast<int64_t>(body->hash));
  a.flag = inline_call;
  NodePtr call = make_node(OpKind::Call, DType::float32, Shape{}, std::move(direct), a);
  call->payload = body;
  std::vector<NodePtr> outs;
  outs.reserve(body->results.size());
  for (size_t i = 0; i < body->results.size(); ++i) {
    Attrs r;
    r.push(static_cast<int64_t>(i));
    const Node& res = *body->results[i];
    outs.push_back(make_node(OpKind::CallResult, res.dtype, res.shape, call, r));
  }
  call->set_results(outs);
  return outs;
}

}  // namespace lazytrace::ir
