#include "ir/graph.h"

#include "core/hash.h"

namespace lazytrace::ir {

Walk walk(const std::vector<Node*>& roots) {
  Walk w;
  const uint32_t epoch = next_walk_epoch();
  struct Frame {
    Node* node;
    int next;
  };
  std::vector<Frame> stack;
  stack.reserve(64);
  w.order.reserve(256);
  uint64_t key = 0x1a2b3c4d5e6f7788ULL;
  for (Node* root : roots) {
    if (root->mark != epoch) {
      root->mark = epoch;
      root->index = -1;
      stack.push_back({root, 0});
    }
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next < f.node->num_operands()) {
        Node* o = f.node->operand(f.next++).get();
        if (o->mark != epoch) {
          o->mark = epoch;
          o->index = -1;
          stack.push_back({o, 0});
        }
        continue;
      }
      Node* n = f.node;
      stack.pop_back();
      n->index = static_cast<int32_t>(w.order.size());
      w.order.push_back(n);
      key = hash_combine(key, n->local_hash);
      for (int i = 0; i < n->num_operands(); ++i)
        key = hash_combine(key, static_cast<uint64_t>(n->operand(i)->index));
      if (n->op == OpKind::Data) w.params.push_back(n);
      if (n->op == OpKind::Scalar && n->scalar_is_param) w.scalars.push_back(n);
    }
    w.results.push_back(root->index);
    key = hash_combine(key, static_cast<uint64_t>(root->index) | (1ULL << 40));
  }
  w.key = key;
  return w;
}

Graph build_graph(const Walk& w, std::string name) {
  Graph g;
  g.name = std::move(name);
  g.key = w.key;
  g.nodes.reserve(w.order.size());
  for (Node* n : w.order) {
    GNode gn;
    gn.op = n->op;
    gn.dtype = n->dtype;
    gn.shape = n->shape;
    gn.attrs = n->attrs;
    gn.value = n->value;
    gn.ivalue = n->ivalue;
    gn.scalar_is_param = n->scalar_is_param;
    gn.inputs.reserve(n->num_operands());
    for (int i = 0; i < n->num_operands(); ++i) gn.inputs.push_back(n->operand(i)->index);
    if (n->op == OpKind::Data) {
      gn.param = static_cast<int>(g.param_nodes.size());
      g.param_nodes.push_back(static_cast<int>(g.nodes.size()));
    } else if (n->op == OpKind::Scalar && n->scalar_is_param) {
      gn.param = static_cast<int>(g.scalar_nodes.size());
      g.scalar_nodes.push_back(static_cast<int>(g.nodes.size()));
    }
    g.nodes.push_back(std::move(gn));
  }
  g.results = w.results;
  return g;
}

}  // namespace lazytrace::ir
