// Unary elementwise ops, each with its VJP rule.
#include <cmath>
#include <numbers>

#include "core/check.h"
#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

using ir::OpKind;

enum class Domain {
  Float,   // integer and bool inputs are computed in float32
  Signed,  // keeps integer dtypes; bool is an error
  Any,
};

// d(op(x))/dx times g, given the input x (in the computing dtype) and the result y.
Tensor unary_vjp(OpKind op, const Tensor& g, const Tensor& x, const Tensor& y) {
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  switch (op) {
    case OpKind::Neg:
      return -g;
    case OpKind::Exp:
      return g * y;
    case OpKind::Log:
      return g / x;
    case OpKind::Log1p:
      return g / (1 + x);
    case OpKind::Sin:
      return g * cos(x);
    case OpKind::Cos:
      return -(g * sin(x));
    case OpKind::Tanh:
      return g * (1 - y * y);
    case OpKind::Sigmoid:
      return g * (y * (1 - y));
    case OpKind::Relu:
      return where(x > 0, g, 0);
    case OpKind::Gelu: {  // Phi(x) + x * phi(x)
      Tensor cdf = 0.5 * (1 + erf(x * kInvSqrt2));
      Tensor pdf = exp(-0.5 * (x * x)) * (kInvSqrt2 / std::sqrt(std::numbers::pi));
      return g * (cdf + x * pdf);
    }
    case OpKind::Erf:
      return g * (exp(-(x * x)) * (2 / std::sqrt(std::numbers::pi)));
    case OpKind::Silu: {
      Tensor s = sigmoid(x);
      return g * (s * (1 + x * (1 - s)));
    }
    case OpKind::Sqrt:
      return g / (2 * y);
    case OpKind::Rsqrt:
      return g * (-0.5 * (y * y * y));
    case OpKind::Abs:
      return where(x > 0, g, where(x < 0, -g, 0));
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_UNARY_OP(kind, name)
#include "ir/ops.def"
      break;
  }
  LT_UNREACHABLE("unary_vjp differentiates a unary op");
}

// Whether unary_vjp reads x (the others read only their result): only those keep their
// input, so a later copy_ into it is no error for exp, tanh and the like.
bool vjp_reads_input(OpKind op) {
  return !(op == OpKind::Neg || op == OpKind::Exp || op == OpKind::Tanh || op == OpKind::Sigmoid ||
           op == OpKind::Sqrt || op == OpKind::Rsqrt);
}

Tensor unary(OpKind op, const Tensor& t, Domain domain) {
  trace::OpScope scope;
  const char* name = ir::op_name(op);
  ops::check_defined(name, t);
  DType dt = t.dtype();
  if (domain == Domain::Float && !is_floating(dt)) dt = DType::float32;
  if (domain == Domain::Signed && dt == DType::bool_)
    fail(name, "is not defined for bool tensors (got ", ops::type_of(t),
         "); convert first with astype(t, lt::int64) or astype(t, lt::float32).");
  Tensor out = trace::make_pending(ir::make_node(op, dt, t.shape(), ops::node_as(t, dt)));
  if (ops::needs_grad(t))
    ops::record_grad(out, name, {&t},
                     [op, x = vjp_reads_input(op) ? ops::SavedInput(name, t) : ops::SavedInput(),
                      y = ops::SavedResult(out)](const Tensor& g) {
                       return std::vector<Tensor>{unary_vjp(op, g, x.get(), y.get())};
                     });
  return out;
}

}  // namespace

Tensor neg(const Tensor& t) {
  return unary(OpKind::Neg, t, Domain::Signed);
}
Tensor exp(const Tensor& t) {
  return unary(OpKind::Exp, t, Domain::Float);
}
Tensor log1p(const Tensor& t) {
  return unary(OpKind::Log1p, t, Domain::Float);
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
Tensor erf(const Tensor& t) {
  return unary(OpKind::Erf, t, Domain::Float);
}
Tensor operator-(const Tensor& t) {
  return neg(t);
}

Tensor astype(const Tensor& t, DType dtype) {
  trace::OpScope scope;
  ops::check_defined("astype", t);
  if (t.dtype() == dtype) return t;
  Tensor out = trace::make_pending(ops::node_as(t, dtype));
  // the gradient is cast back to t's dtype by record_grad
  if (ops::needs_grad(t))
    ops::record_grad(out, "astype", {&t}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor clone(const Tensor& t) {
  ops::check_defined("clone", t);
  Tensor out = t.detach();
  if (ops::needs_grad(t))
    ops::record_grad(out, "clone", {&t}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

}  // namespace lazytrace
