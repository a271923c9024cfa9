// Reductions over any dims with keepdim, and the softmax family built from them.
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
  return trace::make_pending(ir::make_node(op, dt, out, trace::node_of(t), a));
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

Tensor softmax(const Tensor& t, int dim) {
  trace::OpScope scope;
  check_softmax_input("softmax", t);
  ir::normalize_dim("softmax", dim, t.ndim(), t.shape());
  Tensor e = exp(t - amax(t, {dim}, true));
  return e / sum(e, {dim}, true);
}

Tensor log_softmax(const Tensor& t, int dim) {
  trace::OpScope scope;
  check_softmax_input("log_softmax", t);
  ir::normalize_dim("log_softmax", dim, t.ndim(), t.shape());
  Tensor shifted = t - amax(t, {dim}, true);
  return shifted - log(sum(exp(shifted), {dim}, true));
}

}  // namespace lazytrace
