// The slices_in_place pass (lowering_passes.h): a stack that only loops read as xs is never
// made; each iteration reads its part where it lies.
#include "backends/cpu/lowering_passes.h"

#include "ir/loop.h"

namespace lazytrace::cpu {

using ir::OpKind;

GraphUses::GraphUses(const ir::Graph& g) : uses(g.nodes.size(), 0), sole_user(g.nodes.size(), -1) {
  for (size_t u = 0; u < g.nodes.size(); ++u)
    for (int in : g.nodes[u].inputs) {
      ++uses[static_cast<size_t>(in)];
      sole_user[static_cast<size_t>(in)] = static_cast<int>(u);
    }
  for (int r : g.results) ++uses[static_cast<size_t>(r)];
}

std::vector<char> stacks_read_in_place(const ir::Graph& g, const GraphUses& u) {
  std::vector<int> loop_uses(g.nodes.size(), 0);
  for (const ir::GNode& n : g.nodes) {
    if (n.op != OpKind::Loop) continue;
    const ir::Loop& loop = n.loop();
    for (size_t k = 0; k < loop.roles.size(); ++k)
      if (loop.roles[k] == ir::Loop::Role::X) ++loop_uses[static_cast<size_t>(n.inputs[k])];
  }
  std::vector<char> in_place(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::GNode& n = g.nodes[i];
    if (n.op != OpKind::Concat || n.attrs[0] != 0 || u.uses[i] == 0 || u.uses[i] != loop_uses[i])
      continue;
    bool parts = true;
    for (int in : n.inputs) parts = parts && g.nodes[static_cast<size_t>(in)].shape[0] == 1;
    in_place[i] = parts;
  }
  return in_place;
}

}  // namespace lazytrace::cpu
