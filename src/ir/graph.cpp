#include "ir/graph.h"

#include <cstring>
#include <map>
#include <tuple>

#include "core/hash.h"
#include "ir/body.h"
#include "ir/loop.h"

namespace lazytrace::ir {

Walk walk(const std::vector<Node*>& roots) {
  Walk w;
  walk_into(roots, w);
  return w;
}

void add_node(Walk& w, Node& node) {
  node.index = static_cast<int32_t>(w.order.size());
  w.order.push_back(&node);
  w.key = hash_combine(w.key, node.local_hash);
  for (int i = 0; i < node.num_operands(); ++i)
    w.key = hash_combine(w.key, static_cast<uint64_t>(node.operand(i)->index));
}

void add_result(Walk& w, const Node& node) {
  w.results.push_back(node.index);
  w.key = hash_combine(w.key, static_cast<uint64_t>(node.index) | (3ULL << 40));
}

void walk_into(const std::vector<Node*>& roots, Walk& w) {
  w.order.clear();
  w.params.clear();
  w.scalars.clear();
  w.scalar_same.clear();
  w.results.clear();
  const uint32_t epoch = next_walk_epoch();
  struct Frame {
    Node* node;
    int next;
  };
  thread_local std::vector<Frame> stack;  // (a walk calls nothing that walks)
  stack.clear();
  w.key = 0x1a2b3c4d5e6f7788ULL;
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
      add_node(w, *n);
      if (n->op == OpKind::Data) w.params.push_back(n);
      if (n->op == OpKind::Scalar && n->scalar_is_param) w.scalars.push_back(n);
      if (n->op == OpKind::Call) {  // the body's own leaves, where build_graph inlines it
        const Body& b = body_of(*n);
        w.params.insert(w.params.end(), b.data.begin(), b.data.end());
        w.scalars.insert(w.scalars.end(), b.scalars.begin(), b.scalars.end());
      }
      if (n->op == OpKind::Loop) {
        const Loop& l = loop_of(*n);
        w.params.insert(w.params.end(), l.data.begin(), l.data.end());
        w.scalars.insert(w.scalars.end(), l.scalars.begin(), l.scalars.end());
      }
    }
    w.results.push_back(root->index);
    w.key = hash_combine(w.key, static_cast<uint64_t>(root->index) | (1ULL << 40));
  }
  // Equal literal constants (an inlined body and the copy of it that its VJP recomputes
  // each bring their own) share a class, and the key says which: a graph compiled with two
  // of them merged is reused only where they are equal again.
  w.scalar_same.resize(w.scalars.size());
  std::map<std::tuple<int, uint64_t, int64_t>, int> first;
  for (size_t i = 0; i < w.scalars.size(); ++i) {
    const Node& s = *w.scalars[i];
    int rep = static_cast<int>(i);
    if (s.scalar_literal) {
      uint64_t bits;
      std::memcpy(&bits, &s.value, sizeof bits);
      rep = first.try_emplace({static_cast<int>(s.dtype), bits, s.ivalue}, rep).first->second;
    }
    w.scalar_same[i] = rep;
    if (rep != static_cast<int>(i))
      w.key = hash_combine(w.key, (static_cast<uint64_t>(i) << 32) | static_cast<uint64_t>(rep));
  }
  if (stack.capacity() > 4096) std::vector<Frame>().swap(stack);  // a deep graph's memory back
}

namespace {

// Copies a call's body into g: its Params become the call's operands (`args`, graph
// indices), its leaves take the next parameter slots. Returns the graph index of each
// body result.
std::vector<int> inline_body(Graph& g, const Body& b, const std::vector<int>& args,
                             const std::vector<int>* leaves = nullptr) {
  // `leaves`: graph nodes that already stand for b's own Data leaves then its scalar
  // leaves (a nested call being inlined); null: they are made here, taking new slots.
  const size_t nd = b.graph.param_nodes.size();
  std::vector<int> at(b.graph.nodes.size());
  std::map<size_t, std::vector<int>> nested_results;
  for (size_t i = 0; i < b.graph.nodes.size(); ++i) {
    const GNode& bn = b.graph.nodes[i];
    if (bn.op == OpKind::Param) {
      at[i] = args[static_cast<size_t>(bn.attrs[0])];
      continue;
    }
    const bool data = bn.op == OpKind::Data, scalar = bn.op == OpKind::Scalar && bn.scalar_is_param;
    if (leaves && (data || scalar)) {
      at[i] = (*leaves)[static_cast<size_t>(bn.param) + (scalar ? nd : 0)];
      continue;
    }
    if (bn.op == OpKind::Call) {  // a call inside: inlined too, so nothing stays outlined
      const Body& inner = bn.body();
      std::vector<int> inner_args, inner_leaves;
      for (size_t k = 0; k < bn.inputs.size(); ++k)
        (static_cast<int>(k) < inner.num_inputs ? inner_args : inner_leaves)
            .push_back(at[static_cast<size_t>(bn.inputs[k])]);
      nested_results[i] = inline_body(g, inner, inner_args, &inner_leaves);
      continue;
    }
    if (bn.op == OpKind::CallResult && nested_results.count(static_cast<size_t>(bn.inputs[0]))) {
      at[i] =
          nested_results.at(static_cast<size_t>(bn.inputs[0]))[static_cast<size_t>(bn.attrs[0])];
      continue;
    }
    GNode gn = bn;
    for (int& in : gn.inputs) in = at[static_cast<size_t>(in)];
    if (data) {
      gn.param = static_cast<int>(g.param_nodes.size());
      g.param_nodes.push_back(static_cast<int>(g.nodes.size()));
    } else if (scalar) {
      gn.param = static_cast<int>(g.scalar_nodes.size());
      g.scalar_nodes.push_back(static_cast<int>(g.nodes.size()));
    }
    at[i] = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(gn));
  }
  std::vector<int> results;
  for (int r : b.graph.results) results.push_back(at[static_cast<size_t>(r)]);
  return results;
}

// An outlined Call or Loop node of g: its inputs are `args`, then the leaves of its bodies
// (made here, taking the next parameter slots, in the order the walk collected them).
// Returns the graph index of a CallResult node for each of `results`.
std::vector<int> outline(Graph& g, const Node& n, std::vector<int> args,
                         const std::vector<const Graph*>& bodies,
                         const std::vector<std::pair<Shape, DType>>& results) {
  for (const Graph* b : bodies)
    for (int k : b->param_nodes) {
      GNode gn = b->nodes[static_cast<size_t>(k)];
      gn.param = static_cast<int>(g.param_nodes.size());
      g.param_nodes.push_back(static_cast<int>(g.nodes.size()));
      args.push_back(static_cast<int>(g.nodes.size()));
      g.nodes.push_back(std::move(gn));
    }
  for (const Graph* b : bodies)
    for (int k : b->scalar_nodes) {
      GNode gn = b->nodes[static_cast<size_t>(k)];
      gn.param = static_cast<int>(g.scalar_nodes.size());
      g.scalar_nodes.push_back(static_cast<int>(g.nodes.size()));
      args.push_back(static_cast<int>(g.nodes.size()));
      g.nodes.push_back(std::move(gn));
    }
  GNode c;
  c.op = n.op;
  c.dtype = n.dtype;
  c.shape = n.shape;
  c.attrs = n.attrs;
  c.inputs = std::move(args);
  c.payload = n.payload;
  const int ci = static_cast<int>(g.nodes.size());
  g.nodes.push_back(std::move(c));
  std::vector<int> out;
  for (size_t i = 0; i < results.size(); ++i) {
    GNode r;
    r.op = OpKind::CallResult;
    r.shape = results[i].first;
    r.dtype = results[i].second;
    r.attrs.push(static_cast<int64_t>(i));
    r.inputs = {ci};
    out.push_back(static_cast<int>(g.nodes.size()));
    g.nodes.push_back(std::move(r));
  }
  return out;
}

std::vector<int> outline_call(Graph& g, const Node& call, std::vector<int> args) {
  const Body& b = body_of(call);
  std::vector<std::pair<Shape, DType>> types;
  for (const NodePtr& r : b.results) types.emplace_back(r->shape, r->dtype);
  return outline(g, call, std::move(args), {&b.graph}, types);
}

}  // namespace

Graph build_graph(const Walk& w, std::string name) {
  Graph g;
  g.name = std::move(name);
  g.key = w.key;
  g.nodes.reserve(w.order.size());
  // graph index of each walk position (calls are inlined: positions and indices differ)
  std::vector<int> at(w.order.size(), -1);
  std::vector<std::vector<int>> call_results(w.order.size());
  for (size_t pos = 0; pos < w.order.size(); ++pos) {
    Node* n = w.order[pos];
    if (n->op == OpKind::Call) {
      const Body& b = body_of(*n);
      std::vector<int> args;
      const Node* pack = b.packed.empty() ? nullptr : n->operand(n->num_operands() - 1).get();
      for (int i = 0, direct = 0; i < b.num_inputs; ++i) {
        const int k = b.packed.empty() ? -1 : b.packed[static_cast<size_t>(i)];
        args.push_back(k >= 0 ? at[pack->operand(k)->index] : at[n->operand(direct++)->index]);
      }
      call_results[pos] =
          n->attrs.flag ? inline_body(g, b, args) : outline_call(g, *n, std::move(args));
      continue;
    }
    if (n->op == OpKind::Loop) {  // always outlined: its body runs once per iteration
      const Loop& l = loop_of(*n);
      std::vector<int> args;
      for (int i = 0; i < n->num_operands(); ++i) args.push_back(at[n->operand(i)->index]);
      std::vector<const Graph*> bodies{&l.body->graph};
      if (l.cond) bodies.push_back(&l.cond->graph);
      call_results[pos] = outline(g, *n, std::move(args), bodies, l.result_types);
      continue;
    }
    if (n->op == OpKind::Pack) continue;  // read through by the calls that use it
    // the results of calls and loops are resolved here; other ops' (an update's) stay nodes
    const OpKind of = n->op == OpKind::CallResult ? n->operand(0)->op : OpKind::Data;
    if (of == OpKind::Call || of == OpKind::Loop) {
      at[pos] = call_results[n->operand(0)->index][static_cast<size_t>(n->attrs[0])];
      continue;
    }
    GNode gn;
    gn.op = n->op;
    gn.dtype = n->dtype;
    gn.shape = n->shape;
    gn.attrs = n->attrs;
    gn.value = n->value;
    gn.ivalue = n->ivalue;
    gn.scalar_is_param = n->scalar_is_param;
    gn.inputs.reserve(n->num_operands());
    for (int i = 0; i < n->num_operands(); ++i) gn.inputs.push_back(at[n->operand(i)->index]);
    if (n->op == OpKind::Data) {
      gn.param = static_cast<int>(g.param_nodes.size());
      g.param_nodes.push_back(static_cast<int>(g.nodes.size()));
    } else if (n->op == OpKind::Scalar && n->scalar_is_param) {
      gn.param = static_cast<int>(g.scalar_nodes.size());
      g.scalar_nodes.push_back(static_cast<int>(g.nodes.size()));
    }
    at[pos] = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(gn));
  }
  for (int r : w.results) g.results.push_back(at[static_cast<size_t>(r)]);
  if (g.scalar_nodes.size() == w.scalar_same.size()) g.scalar_same = w.scalar_same;
  return g;
}

}  // namespace lazytrace::ir
