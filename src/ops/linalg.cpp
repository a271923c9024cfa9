// matmul: NumPy semantics, batch dims broadcast; the backend calls BLAS. Its VJP is two
// more matmuls. Under autocast its float32 operands are cast to the lower precision first.
#include "lazytrace/ops/autocast.h"
#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

// t as a matrix of its last dim's columns: [prod(leading dims), last] (spelled out, since
// reshape cannot infer a -1 when the last dim, or any, is 0)
Tensor as_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.ndim(); ++d) rows *= t.size(d);
  return reshape(t, {rows, t.size(-1)});
}

// d(loss)/da and d(loss)/db for out = a @ b, in shapes a and b would have as matrices (a
// 1-d a is a row [1, k], a 1-d b a column [k, 1]); record_grad sums broadcast batch dims.
std::vector<Tensor> matmul_vjp(const Tensor& g, const Tensor& a, const Tensor& b) {
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  Tensor a2 = a_vec ? unsqueeze(a, 0) : a;
  Tensor b2 = b_vec ? unsqueeze(b, -1) : b;
  Tensor g2 = g;
  if (a_vec) g2 = unsqueeze(g2, g2.ndim() - (b_vec ? 0 : 1));
  if (b_vec) g2 = unsqueeze(g2, -1);
  Tensor ga = matmul(g2, transpose(b2, -1, -2));
  // a weight shared by every batch (b is a matrix): one product over all rows, rather than
  // one per batch summed afterwards
  Tensor gb = b2.ndim() == 2 && a2.ndim() > 2 ? matmul(transpose(as_rows(a2)), as_rows(g2))
                                              : matmul(transpose(a2, -1, -2), g2);
  // back to the operands' own ranks: sum batch dims first, then drop the added dim
  if (a_vec) ga = reshape(ops::sum_to(ga, a2.shape()), a.shape());
  if (b_vec) gb = reshape(ops::sum_to(gb, b2.shape()), b.shape());
  return {ga, gb};
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope scope;
  ops::check_defined("matmul", a_in, "self");
  ops::check_defined("matmul", b_in, "other");
  // autocast: float32 operands cast to the lower precision first (lazytrace/ops/autocast.h)
  const Tensor a = ops::autocast_lower(a_in), b = ops::autocast_lower(b_in);
  DType common = ops::result_type({ops::PromoteArg::of(a), ops::PromoteArg::of(b)});
  if (common == DType::bool_)
    fail("matmul", "is not defined for bool tensors (", ops::type_of(a), ", ", ops::type_of(b),
         "); convert first with astype(t, lt::float32).");
  Shape shape = ir::matmul_shape(a.shape(), b.shape());
  Tensor out = trace::make_pending(ir::make_node(ir::OpKind::Matmul, common, shape,
                                                 ops::node_as(a, common), ops::node_as(b, common)));
  if (ops::needs_grad(a, b))
    ops::record_grad(out, "matmul", {&a, &b},
                     [sa = ops::SavedInput("matmul", a), sb = ops::SavedInput("matmul", b),
                      common](const Tensor& g) {
                       // the backward's products in the forward's dtype, never cast again
                       // (torch's autocast leaves backward ops alone)
                       AutocastGuard no_autocast(false);
                       return matmul_vjp(g, astype(sa.get(), common), astype(sb.get(), common));
                     });
  return out;
}

}  // namespace lazytrace
