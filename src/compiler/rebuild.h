#pragma once
// The sweep the graph passes share: a new graph built front to back, where each node either
// stays (with its operands renumbered) or is replaced by a node already in the new graph.
#include <vector>

#include "ir/graph.h"

namespace lazytrace::compiler {

/** Builds g again. `replace(out, node)` sees the node with its operands already renumbered
 * into `out` and returns the index in `out` that stands for it (an earlier node, or one it
 * appends to `out`), or -1 to keep it. Parameter and result indices follow; a replaced
 * parameter's slot points nowhere (-1). */
template <class Replace>
ir::Graph rebuild(const ir::Graph& g, Replace&& replace) {
  ir::Graph out;
  out.name = g.name;
  out.key = g.key;
  out.scalar_same = g.scalar_same;
  out.param_nodes.assign(g.param_nodes.size(), -1);
  out.scalar_nodes.assign(g.scalar_nodes.size(), -1);
  out.nodes.reserve(g.nodes.size());
  std::vector<int> pos(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::GNode node = g.nodes[i];
    for (int& x : node.inputs) x = pos[static_cast<size_t>(x)];
    const int to = replace(out, static_cast<const ir::GNode&>(node));
    if (to >= 0) {
      pos[i] = to;
      continue;
    }
    pos[i] = static_cast<int>(out.nodes.size());
    if (node.op == ir::OpKind::Data) out.param_nodes[static_cast<size_t>(node.param)] = pos[i];
    if (node.op == ir::OpKind::Scalar && node.scalar_is_param)
      out.scalar_nodes[static_cast<size_t>(node.param)] = pos[i];
    out.nodes.push_back(std::move(node));
  }
  for (int r : g.results) out.results.push_back(pos[static_cast<size_t>(r)]);
  return out;
}

}  // namespace lazytrace::compiler
