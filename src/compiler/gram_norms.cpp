// The gram_norms pass: the sum of the squares of a product over few rows, sum((a b)²) with
// a [.., M, T] and b [.., T, N], becomes sum((aᵀa) ∘ (b bᵀ)), two T × T products, where
// T (M + N) is well below M N. A gradient norm (clip_grad_norm_) then reads the factors
// of a weight's gradient over few tokens, not the gradient, which grad_product can then
// make inside the update instead of through memory. Requires: cse (the square's operands
// one node). Provides: the norms' new nodes; the products, squares and sums they replace
// are left unread, for DCE.
#include "compiler/passes.h"
#include "compiler/rebuild.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

// A permute that swaps the last two dims and keeps the others.
bool swaps_last_two(const GNode& n) {
  const int nd = n.attrs.n;
  if (n.op != OpKind::Permute || nd < 2) return false;
  for (int d = 0; d < nd - 2; ++d)
    if (n.attrs[d] != d) return false;
  return n.attrs[nd - 2] == nd - 1 && n.attrs[nd - 1] == nd - 2;
}

// The product x stands for (x itself, or x transposed: the same squares), or -1.
int product_of(const ir::Graph& g, int x) {
  const GNode& n = g.nodes[static_cast<size_t>(x)];
  if (swaps_last_two(n)) return product_of(g, n.inputs[0]);
  return n.op == OpKind::Matmul ? x : -1;
}

}  // namespace

ir::Graph gram_norms(const ir::Graph& g) {
  return rebuild(g, [&](ir::Graph& out, const GNode& node) {
    // sum(x * x) over every dim, x a floating product of two operands of its rank
    if (node.op != OpKind::Sum || !node.shape.empty() ||
        (node.dtype != DType::float32 && node.dtype != DType::float64))
      return -1;
    const GNode& sq = out.nodes[static_cast<size_t>(node.inputs[0])];
    if (sq.op != OpKind::Mul || sq.inputs[0] != sq.inputs[1] || sq.dtype != node.dtype) return -1;
    const int m = product_of(out, sq.inputs[0]);
    if (m < 0) return -1;
    const GNode& mm = out.nodes[static_cast<size_t>(m)];
    const int a = mm.inputs[0], b = mm.inputs[1];
    const Shape sa = out.nodes[static_cast<size_t>(a)].shape;
    const Shape sb = out.nodes[static_cast<size_t>(b)].shape;
    const int nd = mm.shape.size();
    if (mm.dtype != node.dtype || nd < 2 || sa.size() != nd || sb.size() != nd) return -1;
    for (int d = 0; d < nd - 2; ++d)
      if (sa[d] != mm.shape[d] || sb[d] != mm.shape[d]) return -1;  // no broadcast batch dims
    const int64_t rows = sa[nd - 2], t = sa[nd - 1], cols = sb[nd - 1];
    // the two T × T products against the product itself, with room for their lower speed
    if (2 * t * (rows + cols) > rows * cols) return -1;

    const DType dt = node.dtype;
    auto emit = [&](OpKind op, Shape shape, std::vector<int> inputs) {
      GNode& e = out.nodes.emplace_back();
      e.op = op;
      e.dtype = dt;
      e.shape = std::move(shape);
      e.inputs = std::move(inputs);
      return static_cast<int>(out.nodes.size()) - 1;
    };
    auto transposed = [&](int x) {  // x with its last two dims swapped
      const GNode& n = out.nodes[static_cast<size_t>(x)];
      if (swaps_last_two(n)) return n.inputs[0];
      Shape s = n.shape;
      std::swap(s[nd - 2], s[nd - 1]);
      const int p = emit(OpKind::Permute, s, {x});
      for (int d = 0; d < nd; ++d) out.nodes.back().attrs.push(d < nd - 2 ? d : 2 * nd - 3 - d);
      return p;
    };
    Shape gram = sa;
    gram[nd - 2] = t;
    const int ga = emit(OpKind::Matmul, gram, {transposed(a), a});  // aᵀ a
    const int gb = emit(OpKind::Matmul, gram, {b, transposed(b)});  // b bᵀ
    const int prod = emit(OpKind::Mul, gram, {ga, gb});
    const int s = emit(OpKind::Sum, Shape{}, {prod});
    for (int d = 0; d < nd; ++d) out.nodes.back().attrs.push(d);
    // at least 0: where the rows' parts cancel, the rounded terms may sum below it (and a
    // norm's square root would be NaN)
    const int zero = emit(OpKind::Scalar, Shape{}, {});
    return emit(OpKind::Maximum, Shape{}, {s, zero});
  });
}

}  // namespace lazytrace::compiler
