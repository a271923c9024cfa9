// The gram_norms pass: the sum of the squares of a product over few rows, sum((a b)²) with
// a [.., M, T] and b [.., T, N] in float32, becomes sum((aᵀa) ∘ (b bᵀ)) in float64, two T × T
// products, where T is at most grad_product's kFewRows and T (M + N) well below M N. A gradient
// norm (clip_grad_norm_) then reads the factors of a weight's gradient over few tokens, not the
// gradient, which grad_product can then make inside the update instead of through memory. Requires:
// cse (the square's operands one node). Provides: the norms' new nodes; the products, squares and
// sums they replace are left unread, for DCE.
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
    // sum(x * x) over every dim, x a float32 product of two operands of its rank (whose
    // Gram matrices' terms cannot overflow in float64)
    if (node.op != OpKind::Sum || !node.shape.empty() || node.dtype != DType::float32) return -1;
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
    // few rows (grad_product's, which then takes the gradient), and two T × T Gram matrices
    // that hold fewer elements than the product by the factors' sizes
    if (t > kFewRows || 2 * t * (rows + cols) > rows * cols) return -1;

    auto emit = [&](OpKind op, DType dt, Shape shape, std::vector<int> inputs) {
      GNode& e = out.nodes.emplace_back();
      e.op = op;
      e.dtype = dt;
      e.shape = std::move(shape);
      e.inputs = std::move(inputs);
      return static_cast<int>(out.nodes.size()) - 1;
    };
    const DType f64 = DType::float64;
    auto wide = [&](int x) {  // x in float64
      return emit(OpKind::Cast, f64, Shape(out.nodes[static_cast<size_t>(x)].shape), {x});
    };
    auto transposed = [&](int x) {  // x with its last two dims swapped
      Shape s = out.nodes[static_cast<size_t>(x)].shape;
      std::swap(s[nd - 2], s[nd - 1]);
      const int p = emit(OpKind::Permute, f64, s, {x});
      for (int d = 0; d < nd; ++d) out.nodes.back().attrs.push(d < nd - 2 ? d : 2 * nd - 3 - d);
      return p;
    };
    // a factor and its transpose in float64, each cast once
    auto factor = [&](int x) -> std::pair<int, int> {
      const GNode& n = out.nodes[static_cast<size_t>(x)];
      if (swaps_last_two(n)) {
        const int y = wide(n.inputs[0]);
        return {transposed(y), y};
      }
      const int y = wide(x);
      return {y, transposed(y)};
    };
    auto sum_all = [&](int x) {
      const DType dt = out.nodes[static_cast<size_t>(x)].dtype;
      const int s = emit(OpKind::Sum, dt, Shape{}, {x});
      for (int d = 0; d < nd; ++d) out.nodes.back().attrs.push(d);
      return s;
    };
    const int zero = emit(OpKind::Scalar, f64, Shape{}, {});
    // In float64 the factors' products are exact and their sums hold what cancels between
    // rows to far below float32's rounding (in float32 a weight's gradient near a minimum,
    // its tokens' parts cancelling, lost most of its norm), and no square overflows.
    const auto [a64, at64] = factor(a);
    const auto [b64, bt64] = factor(b);
    Shape gram = sa;
    gram[nd - 2] = t;
    const int ga = emit(OpKind::Matmul, f64, gram, {at64, a64});  // aᵀ a
    const int gb = emit(OpKind::Matmul, f64, gram, {b64, bt64});  // b bᵀ
    // at least 0: the rounded terms of rows that cancel may sum below it
    const int sum = emit(OpKind::Maximum, f64, Shape{},
                         {sum_all(emit(OpKind::Mul, f64, gram, {ga, gb})), zero});
    // factors that are not all finite: what the squares would give, inf where one is
    // infinite, NaN where one is NaN (the Gram matrices would mix infinities into NaN). In
    // float32: their sum of sizes overflows only where the squares would.
    const DType f32 = DType::float32;
    const int size = emit(OpKind::Add, f32, Shape{},
                          {sum_all(emit(OpKind::Abs, f32, Shape(sa), {a})),
                           sum_all(emit(OpKind::Abs, f32, Shape(sb), {b}))});
    const int finite = emit(
        OpKind::Eq, DType::bool_, Shape{},
        {emit(OpKind::Sub, f32, Shape{}, {size, size}), emit(OpKind::Scalar, f32, Shape{}, {})});
    return emit(OpKind::Where, f32, Shape{},
                {finite, emit(OpKind::Cast, f32, Shape{}, {sum}), size});
  });
}

}  // namespace lazytrace::compiler
