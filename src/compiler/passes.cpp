// Graph-to-graph passes run before lowering: algebraic simplification, common
// subexpression elimination, and dead code elimination.
#include <unordered_map>

#include "compiler/passes.h"
#include "core/hash.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

bool is_const(const ir::Graph& g, int n, double v) {
  const GNode& s = g.nodes[n];
  return s.op == OpKind::Scalar && !s.scalar_is_param && s.value == v;
}

// x + 0, x - 0, x * 1, x / 1 (where the result has x's shape and dtype) are x.
int simplify(const ir::Graph& g, const GNode& n, const std::vector<int>& in) {
  if (n.inputs.size() != 2) return -1;
  auto same = [&](int k) {
    const GNode& x = g.nodes[n.inputs[k]];
    return x.shape == n.shape && x.dtype == n.dtype;
  };
  const int a = n.inputs[0], b = n.inputs[1];
  // the identity element on the right (x op e == x), and for + and * on the left too
  const bool add = n.op == OpKind::Add || n.op == OpKind::Sub;
  const bool mul = n.op == OpKind::Mul || n.op == OpKind::Div;
  if (!add && !mul) return -1;
  const double e = add ? 0 : 1;
  const bool commutes = n.op == OpKind::Add || n.op == OpKind::Mul;
  if (is_const(g, b, e) && same(0)) return in[0];
  if (commutes && is_const(g, a, e) && same(1)) return in[1];
  return -1;
}

// The slot a node is compared by: a scalar parameter's class (Graph::scalar_same: equal
// literal constants merge), a buffer parameter's own slot.
int slot_of(const ir::Graph& g, const GNode& n) {
  if (n.op == OpKind::Scalar && n.scalar_is_param && !g.scalar_same.empty())
    return g.scalar_same[static_cast<size_t>(n.param)];
  return n.param;
}

uint64_t node_key(const ir::Graph& g, const GNode& n, const std::vector<int>& in) {
  uint64_t h = hash_mix((static_cast<uint64_t>(n.op) << 8) | static_cast<uint64_t>(n.dtype));
  for (int64_t d : n.shape) h = hash_combine(h, static_cast<uint64_t>(d));
  h = hash_combine(h, n.attrs.hash());
  h = hash_combine(h, hash_double(n.value));
  h = hash_combine(h, static_cast<uint64_t>(slot_of(g, n) + 1));
  for (int i : in) h = hash_combine(h, static_cast<uint64_t>(i));
  return h;
}

bool same_node(const ir::Graph& g, const GNode& a, const GNode& b) {
  return a.op == b.op && a.dtype == b.dtype && a.shape == b.shape && a.inputs == b.inputs &&
         slot_of(g, a) == slot_of(g, b) && a.value == b.value && a.ivalue == b.ivalue &&
         a.attrs.n == b.attrs.n && std::equal(a.attrs.begin(), a.attrs.end(), b.attrs.begin()) &&
         a.attrs.flag == b.attrs.flag;
}

}  // namespace

ir::Graph optimize(const ir::Graph& g, runtime::PassSet passes) {
  const bool simplifies = passes.on(runtime::Pass::Simplify),
             merges = passes.on(runtime::Pass::Cse);
  const int n = static_cast<int>(g.nodes.size());
  // 1. simplify and merge, front to back
  std::vector<int> remap(n, -1);
  ir::Graph out;
  out.name = g.name;
  out.key = g.key;
  std::unordered_multimap<uint64_t, int> seen;
  for (int i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    std::vector<int> in;
    in.reserve(node.inputs.size());
    for (int x : node.inputs) in.push_back(remap[x]);
    int s = simplifies ? simplify(g, node, in) : -1;
    if (s >= 0) {
      remap[i] = s;
      continue;
    }
    GNode copy = node;
    copy.inputs = in;
    bool stateful = node.op == OpKind::Data || !merges;  // parameters are never merged
    uint64_t k = node_key(g, copy, in);
    int found = -1;
    if (!stateful) {
      auto range = seen.equal_range(k);
      for (auto it = range.first; it != range.second && found < 0; ++it)
        if (same_node(g, out.nodes[it->second], copy)) found = it->second;
    }
    if (found >= 0) {
      remap[i] = found;
      continue;
    }
    remap[i] = static_cast<int>(out.nodes.size());
    seen.emplace(k, remap[i]);
    out.nodes.push_back(std::move(copy));
  }
  for (int r : g.results) out.results.push_back(remap[r]);
  if (passes.on(runtime::Pass::GradProduct)) fuse_grad_products(out);
  // 2. drop what no result reaches (parameters stay: their slots are fixed)
  const int m = static_cast<int>(out.nodes.size());
  std::vector<char> live(m, 0);
  for (int r : out.results) live[r] = 1;
  for (int i = m - 1; i >= 0; --i) {
    if (out.nodes[i].op == OpKind::Data ||
        (out.nodes[i].op == OpKind::Scalar && out.nodes[i].scalar_is_param))
      live[i] = 1;
    if (live[i])
      for (int x : out.nodes[i].inputs) live[x] = 1;
  }
  ir::Graph dce;
  dce.name = out.name;
  dce.key = out.key;
  std::vector<int> pos(m, -1);
  dce.param_nodes.assign(g.param_nodes.size(), -1);
  dce.scalar_nodes.assign(g.scalar_nodes.size(), -1);
  for (int i = 0; i < m; ++i) {
    if (!live[i]) continue;
    GNode node = std::move(out.nodes[i]);
    for (int& x : node.inputs) x = pos[x];
    pos[i] = static_cast<int>(dce.nodes.size());
    if (node.op == OpKind::Data) dce.param_nodes[node.param] = pos[i];
    if (node.op == OpKind::Scalar && node.scalar_is_param) dce.scalar_nodes[node.param] = pos[i];
    dce.nodes.push_back(std::move(node));
  }
  for (int r : out.results) dce.results.push_back(pos[r]);
  return dce;
}

}  // namespace lazytrace::compiler
