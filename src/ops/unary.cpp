// Unary elementwise ops.
#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

using ir::OpKind;

enum class Domain {
  Float,   // integer and bool inputs are computed in float32
  Signed,  // keeps integer dtypes; bool is an error
  Any,
};

Tensor unary(OpKind op, const Tensor& t, Domain domain) {
  trace::OpScope scope;
  const char* name = ir::op_name(op);
  ops::check_defined(name, t);
  DType dt = t.dtype();
  if (domain == Domain::Float && !is_floating(dt)) dt = DType::float32;
  if (domain == Domain::Signed && dt == DType::bool_)
    fail(name, "is not defined for bool tensors (got ", ops::type_of(t),
         "); convert first with astype(t, lt::int64) or astype(t, lt::float32).");
  return trace::make_pending(ir::make_node(op, dt, t.shape(), ops::node_as(t, dt)));
}

}  // namespace

Tensor neg(const Tensor& t) {
  return unary(OpKind::Neg, t, Domain::Signed);
}
Tensor exp(const Tensor& t) {
  return unary(OpKind::Exp, t, Domain::Float);
}
Tensor log(const Tensor& t) {
  return unary(OpKind::Log, t, Domain::Float);
}
Tensor sin(const Tensor& t) {
  return unary(OpKind::Sin, t, Domain::Float);
}
Tensor cos(const Tensor& t) {
  return unary(OpKind::Cos, t, Domain::Float);
}
Tensor tanh(const Tensor& t) {
  return unary(OpKind::Tanh, t, Domain::Float);
}
Tensor sigmoid(const Tensor& t) {
  return unary(OpKind::Sigmoid, t, Domain::Float);
}
Tensor relu(const Tensor& t) {
  return unary(OpKind::Relu, t, Domain::Signed);
}
Tensor gelu(const Tensor& t) {
  return unary(OpKind::Gelu, t, Domain::Float);
}
Tensor silu(const Tensor& t) {
  return unary(OpKind::Silu, t, Domain::Float);
}
Tensor sqrt(const Tensor& t) {
  return unary(OpKind::Sqrt, t, Domain::Float);
}
Tensor rsqrt(const Tensor& t) {
  return unary(OpKind::Rsqrt, t, Domain::Float);
}
Tensor abs(const Tensor& t) {
  return unary(OpKind::Abs, t, Domain::Signed);
}
Tensor operator-(const Tensor& t) {
  return neg(t);
}

Tensor astype(const Tensor& t, DType dtype) {
  trace::OpScope scope;
  ops::check_defined("astype", t);
  if (t.dtype() == dtype) return t;
  return trace::make_pending(ops::node_as(t, dtype));
}

Tensor clone(const Tensor& t) {
  ops::check_defined("clone", t);
  TensorImpl& impl = *t.impl();
  if (!impl.pending()) return trace::make_materialized(impl.materialized(), impl.dtype, impl.shape);
  trace::OpScope scope;
  return trace::make_pending(impl.node);
}

}  // namespace lazytrace
