// The cse pass: a node with the op, dtype, shape, attributes and operands of an earlier one
// is that node. Buffer parameters never merge; scalar parameters merge by
// Graph::scalar_same (equal literal constants). Requires nothing; provides final use counts.
#include <unordered_map>

#include "compiler/passes.h"
#include "compiler/rebuild.h"
#include "core/hash.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

// The slot a node is compared by: a scalar parameter's class, a buffer parameter's own slot.
int slot_of(const ir::Graph& g, const GNode& n) {
  if (n.op == OpKind::Scalar && n.scalar_is_param && !g.scalar_same.empty())
    return g.scalar_same[static_cast<size_t>(n.param)];
  return n.param;
}

uint64_t node_key(const ir::Graph& g, const GNode& n) {
  uint64_t h = hash_mix((static_cast<uint64_t>(n.op) << 8) | static_cast<uint64_t>(n.dtype));
  for (int64_t d : n.shape) h = hash_combine(h, static_cast<uint64_t>(d));
  h = hash_combine(h, n.attrs.hash());
  h = hash_combine(h, hash_double(n.value));
  h = hash_combine(h, static_cast<uint64_t>(slot_of(g, n) + 1));
  for (int i : n.inputs) h = hash_combine(h, static_cast<uint64_t>(i));
  return h;
}

bool same_node(const ir::Graph& g, const GNode& a, const GNode& b) {
  return a.op == b.op && a.dtype == b.dtype && a.shape == b.shape && a.inputs == b.inputs &&
         slot_of(g, a) == slot_of(g, b) && a.value == b.value && a.ivalue == b.ivalue &&
         a.attrs.n == b.attrs.n && std::equal(a.attrs.begin(), a.attrs.end(), b.attrs.begin()) &&
         a.attrs.flag == b.attrs.flag;
}

}  // namespace

ir::Graph cse(const ir::Graph& g) {
  std::unordered_multimap<uint64_t, int> seen;
  return rebuild(g, [&](const ir::Graph& out, const GNode& node) {
    if (node.op == OpKind::Data) return -1;  // each buffer parameter is its own value
    const uint64_t k = node_key(g, node);
    auto range = seen.equal_range(k);
    for (auto it = range.first; it != range.second; ++it)
      if (same_node(g, out.nodes[static_cast<size_t>(it->second)], node)) return it->second;
    seen.emplace(k, static_cast<int>(out.nodes.size()));  // the index `node` will get
    return -1;
  });
}

}  // namespace lazytrace::compiler
