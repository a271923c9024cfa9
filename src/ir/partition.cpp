#include "ir/partition.h"

#include "ir/body.h"
#include "ir/graph.h"

namespace lazytrace::ir {

namespace {

NodePtr clone_with(const Node& n, std::vector<NodePtr> operands) {
  NodePtr c = make_node(n.op, n.dtype, n.shape, std::move(operands), n.attrs);
  c->payload = n.payload;  // a Call's body or a Loop
  return c;
}

// A view the backward rebuilds from its saved operand rather than saving it: the same
// values or fewer, and saving it would copy them into its layout (a transposed activation
// read by a weight's gradient). A slice is saved as it is: its operand may be far larger.
bool rebuilt_view(OpKind op) {
  return op == OpKind::Permute || op == OpKind::Reshape || op == OpKind::BroadcastTo;
}

}  // namespace

Partition partition(const std::vector<NodePtr>& roots,
                    const std::function<bool(const Node&)>& is_tangent, int first_param) {
  std::vector<Node*> raw;
  for (const NodePtr& r : roots) raw.push_back(r.get());
  Walk w = walk(raw);
  const size_t n = w.order.size();
  // the NodePtr of each walk position (operands hold them; the walk has raw pointers)
  std::vector<NodePtr> ptr(n);
  for (size_t i = 0; i < roots.size(); ++i) ptr[static_cast<size_t>(w.results[i])] = roots[i];
  // constant: computed from no Param at all (a layer's rotary tables, its causal mask): the
  // backward computes it again rather than read it saved per iteration, and in a loop's body
  // it is loop-invariant, made once per loop (lowering's hoist_invariants)
  std::vector<char> dep(n, 0), cheap(n, 0), constant(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *w.order[i];
    constant[i] = node.op != OpKind::Param;
    for (int k = 0; k < node.num_operands(); ++k) {
      const NodePtr& o = node.operand(k);
      ptr[static_cast<size_t>(o->index)] = o;
      dep[i] |= dep[static_cast<size_t>(o->index)];
      constant[i] &= constant[static_cast<size_t>(o->index)];
    }
    if (node.num_operands() == 0) {
      dep[i] = is_tangent(node);
      cheap[i] = !dep[i];
    } else if (constant[i]) {
      cheap[i] = 1;
    } else if (!dep[i] && rebuilt_view(node.op)) {
      cheap[i] = 1;  // its operand is saved (or rebuilt) instead: no copy in the layout
    } else if (!dep[i] && node.op == OpKind::Pack) {
      cheap[i] = 1;  // not a value to save: rebuilt over its operands, saved or rebuilt
    } else if (!dep[i] && is_layout(node.op)) {
      bool all = true;
      for (int k = 0; k < node.num_operands(); ++k)
        all = all && cheap[static_cast<size_t>(node.operand(k)->index)];
      cheap[i] = all;
    }
  }
  Partition p;
  std::vector<NodePtr> made(n);  // the backward's node for each position
  auto get = [&](size_t i) -> NodePtr {
    if (made[i]) return made[i];
    const Node& node = *w.order[i];
    if (!dep[i] && !cheap[i]) {  // a residual: read from the forward
      made[i] =
          make_param(first_param + static_cast<int>(p.residuals.size()), node.dtype, node.shape);
      p.residuals.push_back(ptr[i]);
    } else if (node.num_operands() == 0) {
      made[i] = ptr[i];
    }
    return made[i];
  };
  for (size_t i = 0; i < n; ++i) {  // post order: operands are made before their users
    const Node& node = *w.order[i];
    if (!dep[i] && !cheap[i]) continue;  // made on first use
    if (node.num_operands() == 0) continue;
    std::vector<NodePtr> ops;
    bool same = true;
    for (int k = 0; k < node.num_operands(); ++k) {
      const size_t o = static_cast<size_t>(node.operand(k)->index);
      ops.push_back(get(o));
      same = same && ops.back() == node.operand(k);
    }
    made[i] = same ? ptr[i] : clone_with(node, std::move(ops));
  }
  for (size_t r = 0; r < roots.size(); ++r)
    p.roots.push_back(get(static_cast<size_t>(w.results[r])));
  return p;
}

}  // namespace lazytrace::ir
