// The grad_product pass: AdamW(param, matmul(a, b), ...) becomes AdamWProduct(param, a, b,
// ...) where the product is a weight's float32 gradient over few rows (xᵀ dy at most 32
// tokens deep, or its transpose) that only the update reads, or that times a single value
// (a clipped gradient: AdamWProduct takes the value as its last operand). The update then
// computes the gradient a block of rows at a time beside itself, in cache, and it never goes
// through memory. Requires: the graph merged (CSE), so use counts are final. Provides: AdamWProduct
// nodes; the products they replace are left unread, for DCE.
#include <vector>

#include "compiler/passes.h"
#include "ir/node.h"

namespace lazytrace::compiler {

using ir::GNode;
using ir::OpKind;

void fuse_grad_products(ir::Graph& g) {
  const size_t n = g.nodes.size();
  std::vector<int> uses(n, 0);
  for (const GNode& node : g.nodes)
    for (int in : node.inputs) ++uses[static_cast<size_t>(in)];
  for (int r : g.results) ++uses[static_cast<size_t>(r)];  // a result is read from outside
  for (GNode& u : g.nodes) {
    if (u.op != OpKind::AdamW) continue;
    int grad = u.inputs[1], scale = -1;
    if (uses[static_cast<size_t>(grad)] != 1) continue;
    if (const GNode& sn = g.nodes[static_cast<size_t>(grad)]; sn.op == OpKind::Mul) {
      // the gradient times a single float32 value (clip_grad_norm_'s factor)
      for (int k : {0, 1}) {
        const GNode& s = g.nodes[static_cast<size_t>(sn.inputs[k])];
        if (s.shape.empty() && s.dtype == DType::float32 && sn.dtype == DType::float32) {
          scale = sn.inputs[k];
          grad = sn.inputs[1 - k];
          break;
        }
      }
      if (scale < 0 || uses[static_cast<size_t>(grad)] != 1) continue;
    }
    const GNode& gn = g.nodes[static_cast<size_t>(grad)];
    if (gn.shape != u.shape) continue;
    int m = grad;
    const bool transposed = ir::is_matrix_transpose(gn.op, gn.attrs);
    if (transposed) {
      m = gn.inputs[0];
      if (uses[static_cast<size_t>(m)] != 1) continue;
    }
    const GNode& mm = g.nodes[static_cast<size_t>(m)];
    if (mm.op != OpKind::Matmul || mm.dtype != DType::float32 || mm.shape.size() < 2) continue;
    const int nd = mm.shape.size();
    bool fits = true;  // float32 operands of the product's rank, no broadcast batch dims
    for (int in : mm.inputs) {
      const GNode& x = g.nodes[static_cast<size_t>(in)];
      fits = fits && x.dtype == DType::float32 && x.shape.size() == nd;
      for (int d = 0; fits && d < nd - 2; ++d) fits = x.shape[d] == mm.shape[d];
    }
    if (!fits || g.nodes[static_cast<size_t>(mm.inputs[1])].shape[nd - 2] > kFewRows) continue;
    const std::vector<int> in = u.inputs;  // param, grad, exp_avg, exp_avg_sq, 3 numbers
    u.op = OpKind::AdamWProduct;
    u.inputs = {in[0], mm.inputs[0], mm.inputs[1], in[2], in[3], in[4], in[5], in[6]};
    if (scale >= 0) u.inputs.push_back(scale);
    u.attrs.flag = transposed;
  }
}

}  // namespace lazytrace::compiler
