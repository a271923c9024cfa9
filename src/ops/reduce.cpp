// Reductions over any dims with keepdim, and the softmax family built from them, each
// with its VJP rule.
#include <algorithm>

#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

using ir::OpKind;

Tensor reduce(OpKind op, const Tensor& t, std::vector<int> dims, bool keepdim, bool all) {
  trace::OpScope scope;
  const char* name = ir::op_name(op);
  ops::check_defined(name, t);
  if (all) dims.clear();
  Shape out = ir::reduce_shape(name, t.shape(), dims, keepdim);
  DType in = t.dtype(), dt = in;
  if (op == OpKind::Sum && !is_floating(in)) dt = DType::int64;  // as torch.sum
  if (op == OpKind::Mean && !is_floating(in))
    fail(name, "needs a floating input, got ", ops::type_of(t),
         "; convert first with astype(t, lt::float32).");
  if (op == OpKind::Amax)
    for (int d : dims)
      if (t.shape()[d] == 0)
        fail(name, "cannot reduce over dim ", d, " of size 0 (shape ", t.shape().str(),
             "): the maximum of nothing is undefined.");
  ir::Attrs a;
  for (int d : dims) a.push(d);
  a.flag = keepdim;
  Tensor result = trace::make_pending(ir::make_node(op, dt, out, trace::node_of(t), a));
  if (ops::needs_grad(t)) {
    // the result with the reduced dims kept (size 1), so it broadcasts against t
    Shape kept = t.shape();
    for (int d = 0; d < kept.size(); ++d)
      if (dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end()) kept[d] = 1;
    ops::record_grad(
        result, name, {&t},
        [op, in = t.shape(), dt = t.dtype(),
         x = op == OpKind::Amax ? ops::SavedInput(name, t) : ops::SavedInput(), kept, dims,
         y = ops::SavedResult(result)](const Tensor& g) {
          Tensor gk = broadcast_to(reshape(g, kept), in);
          if (op == OpKind::Sum) return std::vector<Tensor>{gk};
          if (op == OpKind::Mean)
            return std::vector<Tensor>{gk * (static_cast<double>(kept.numel()) / in.numel())};
          // amax: the gradient goes to the maxima, split evenly among ties
          Tensor is_max = astype(x.get() == reshape(y.get(), kept), dt);
          Tensor ties = dims.empty() ? reshape(sum(is_max), kept) : sum(is_max, dims, true);
          return std::vector<Tensor>{gk * is_max / ties};
        });
  }
  return result;
}

void check_softmax_input(const char* name, const Tensor& t) {
  ops::check_defined(name, t);
  if (!is_floating(t.dtype()))
    fail(name, "needs a floating input, got ", ops::type_of(t),
         "; convert first with astype(t, lt::float32).");
}

}  // namespace

Tensor sum(const Tensor& t) {
  return reduce(OpKind::Sum, t, {}, false, true);
}
Tensor sum(const Tensor& t, std::vector<int> dims, bool keepdim) {
  return reduce(OpKind::Sum, t, std::move(dims), keepdim, false);
}
Tensor mean(const Tensor& t) {
  return reduce(OpKind::Mean, t, {}, false, true);
}
Tensor mean(const Tensor& t, std::vector<int> dims, bool keepdim) {
  return reduce(OpKind::Mean, t, std::move(dims), keepdim, false);
}
Tensor amax(const Tensor& t) {
  return reduce(OpKind::Amax, t, {}, false, true);
}
Tensor amax(const Tensor& t, std::vector<int> dims, bool keepdim) {
  return reduce(OpKind::Amax, t, std::move(dims), keepdim, false);
}

// softmax and log_softmax record one VJP each instead of the rules of their parts: a
// shorter tape, and no gradient through the max that is subtracted for stability.
namespace {
// The dtype a composite op computes in: float32 for 16-bit floats.
Tensor opmath(const Tensor& t) {
  return t.dtype() == DType::float16 || t.dtype() == DType::bfloat16 ? astype(t, DType::float32)
                                                                     : t;
}
// x less its max along dim, for stability; along an empty dim (an empty result) x itself,
// since there is no max to take.
Tensor less_max(const Tensor& x, int dim) {
  return x.shape()[dim] == 0 ? x : x - amax(x, {dim}, true);
}
}  // namespace

Tensor softmax(const Tensor& t, int dim) {
  trace::OpScope scope;
  check_softmax_input("softmax", t);
  dim = ir::normalize_dim("softmax", dim, t.ndim(), t.shape());
  Tensor y;
  {
    NoGradGuard no_grad;
    // 16-bit inputs are computed in float32 and rounded once, as PyTorch does
    const Tensor x = opmath(t);
    Tensor e = exp(less_max(x, dim));
    y = astype(e / sum(e, {dim}, true), t.dtype());
  }
  if (ops::needs_grad(t))
    ops::record_grad(y, "softmax", {&t}, [dim, s = ops::SavedResult(y)](const Tensor& g) {
      Tensor yv = s.get();
      return std::vector<Tensor>{yv * (g - sum(g * yv, {dim}, true))};
    });
  return y;
}

Tensor log_softmax(const Tensor& t, int dim) {
  trace::OpScope scope;
  check_softmax_input("log_softmax", t);
  dim = ir::normalize_dim("log_softmax", dim, t.ndim(), t.shape());
  Tensor y;
  {
    NoGradGuard no_grad;
    const Tensor x = opmath(t);
    Tensor shifted = less_max(x, dim);
    y = astype(shifted - log(sum(exp(shifted), {dim}, true)), t.dtype());
  }
  if (ops::needs_grad(t))
    ops::record_grad(y, "log_softmax", {&t}, [dim, s = ops::SavedResult(y)](const Tensor& g) {
      return std::vector<Tensor>{g - exp(s.get()) * sum(g, {dim}, true)};
    });
  return y;
}

Tensor ops::sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.ndim() - shape.size();
  std::vector<int> dims;
  for (int d = 0; d < g.ndim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  return reshape(sum(g, dims, true), shape);
}

}  // namespace lazytrace
