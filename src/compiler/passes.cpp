// The graph pipeline before a device compiles a graph: simplify, cse, slice_grads,
// gram_norms and grad_product (each switchable, runtime/passes.def), then dead code
// elimination (always: lowering assumes every node is read).
#include "compiler/passes.h"
#include "compiler/rebuild.h"

namespace lazytrace::compiler {

ir::Graph eliminate_dead(const ir::Graph& g) {
  const size_t n = g.nodes.size();
  std::vector<char> live(n, 0);
  for (int r : g.results) live[static_cast<size_t>(r)] = 1;
  for (size_t i = n; i-- > 0;) {
    const ir::GNode& node = g.nodes[i];
    // parameters stay: their slots are fixed
    if (node.op == ir::OpKind::Data || (node.op == ir::OpKind::Scalar && node.scalar_is_param))
      live[i] = 1;
    if (live[i])
      for (int x : node.inputs) live[static_cast<size_t>(x)] = 1;
  }
  size_t i = 0;
  // a dead node is never read, so the index it stands for does not matter
  return rebuild(g, [&](const ir::Graph&, const ir::GNode&) { return live[i++] ? -1 : 0; });
}

ir::Graph optimize(const ir::Graph& g, runtime::PassSet passes) {
  ir::Graph out = passes.on(runtime::Pass::Simplify) ? simplify(g) : g;
  if (passes.on(runtime::Pass::Cse)) out = cse(out);
  if (passes.on(runtime::Pass::SliceGrads)) out = accumulate_slice_grads(out);
  // the norms' old squares go first: grad_product counts every reader of a gradient
  if (passes.on(runtime::Pass::GramNorms)) out = eliminate_dead(gram_norms(out));
  if (passes.on(runtime::Pass::GradProduct)) fuse_grad_products(out);
  return eliminate_dead(out);
}

}  // namespace lazytrace::compiler
