// Binary elementwise ops (arithmetic, comparison) and where, with NumPy broadcasting
// and PyTorch's promotion, each with its VJP rule. Operands are cast to the common dtype
// here, so the kernels only ever see matching operand dtypes.
#include "core/check.h"
#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

using ir::OpKind;

struct Operand {
  const Tensor* t = nullptr;
  const Scalar* s = nullptr;
  ops::PromoteArg promote() const { return t ? ops::PromoteArg::of(*t) : ops::PromoteArg::of(*s); }
  ir::NodePtr node(DType d, const char* op) const {
    return t ? ops::node_as(*t, d) : ops::scalar_operand(*s, d, op);
  }
  Shape shape() const { return t ? t->shape() : Shape{}; }
  std::string str() const {
    return t ? ops::type_of(*t) : std::string("scalar ") + dtype_name(s->kind());
  }
};

/** An operand as a VJP rule reads it, kept as recorded (a tensor or a number) and made a
 * tensor in the computing dtype only when the backward runs. */
struct SavedOperand {
  ops::SavedInput t;
  Scalar s = 0;
  DType dtype = DType::float32;
  SavedOperand() = default;
  SavedOperand(const char* op, const Operand& o, DType d) : dtype(d) {
    if (o.t)
      t = ops::SavedInput(op, *o.t);
    else
      s = *o.s;
  }
  Tensor get() const {
    const Tensor& x = t.get();
    if (x.defined() && x.dtype() == dtype) return x;
    NoGradGuard no_grad;  // the cast is for the rule's arithmetic, not part of the tape
    return x.defined() ? astype(x, dtype) : scalar(s, dtype);
  }
};

// The gradients of out = op(a, b) for both operands, given g = d(loss)/d(out).
// Add and Sub read neither operand, div only b (and out); the others read both, except that
// `ga` / `gb` say which gradients are wanted, and mul reads only the other factor of each it
// gives (so a factor written in place since is an error only where it is read).
std::pair<Tensor, Tensor> binary_vjp(OpKind op, const Tensor& g, const SavedOperand& sa,
                                     const SavedOperand& sb, const Tensor& out, bool ga, bool gb) {
  switch (op) {
    case OpKind::Add:
      return {g, g};
    case OpKind::Sub:
      return {g, -g};
    case OpKind::Mul:
      return {ga ? g * sb.get() : Tensor(), gb ? g * sa.get() : Tensor()};
    case OpKind::Div: {
      const Tensor b = sb.get();
      return {g / b, -(g * out) / b};
    }
    case OpKind::Pow: {  // as PyTorch: 0 where the exponent is 0, or the base 0 and b >= 0
      const Tensor a = sa.get(), b = sb.get();
      return {where(b == 0, 0, g * (b * pow(a, b - 1))),
              where((a == 0) * (b >= 0), 0, g * (out * log(a)))};
    }
    case OpKind::Maximum:
    case OpKind::Minimum: {  // a tie splits the gradient evenly, as in PyTorch
      const Tensor a = sa.get(), b = sb.get();
      Tensor a_wins = op == OpKind::Maximum ? a > b : a < b;
      Tensor half = where(a == b, g * 0.5, 0);
      return {where(a_wins, g, half), where(a_wins + (a == b), half, g)};
    }
    case OpKind::Atan2: {  // d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
      const Tensor a = sa.get(), b = sb.get();
      Tensor scale = g / (a * a + b * b);
      return {scale * b, -(scale * a)};
    }
    case OpKind::FloorDiv:  // a step function: 0 almost everywhere, as in PyTorch
      return {zeros_like(g), zeros_like(g)};
    case OpKind::Remainder:  // a - (a // b) b: d/da = 1, d/db = -(a // b)
      return {g, gb ? -(g * floor_divide(sa.get(), sb.get())) : Tensor()};
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_BINARY_OP(kind, name)
#include "ir/ops.def"
      break;
  }
  LT_UNREACHABLE("binary_vjp differentiates a binary op");
}

Tensor binary(OpKind op, Operand a, Operand b) {
  trace::OpScope scope;
  const char* name = ir::op_name(op);
  if (a.t) ops::check_defined(name, *a.t, "self");
  if (b.t) ops::check_defined(name, *b.t, "other");
  DType common = ops::result_type({a.promote(), b.promote()});
  const bool cmp = ir::is_compare(op);
  // As in PyTorch: bool + bool is a logical or and bool * bool an and (the result stays
  // bool); bool with an integer counts in that integer type (promotion does that).
  if (!cmp && common == DType::bool_ &&
      (op == OpKind::Sub || op == OpKind::Pow || op == OpKind::FloorDiv || op == OpKind::Remainder))
    fail(name, "is not supported between bool operands (", a.str(), ", ", b.str(),
         "); convert with astype(t, lt::int64) first.");
  // true division; atan2 of integers is an angle
  if ((op == OpKind::Div || op == OpKind::Atan2) && !is_floating(common)) common = DType::float32;
  Shape shape = ir::broadcast_shapes(name, a.shape(), b.shape());
  DType out_dtype = cmp ? DType::bool_ : common;
  Tensor out = trace::make_pending(
      ir::make_node(op, out_dtype, std::move(shape), a.node(common, name), b.node(common, name)));
  if (!cmp && ops::needs_grad(a.t, b.t)) {
    const bool ga = ops::needs_grad(a.t), gb = ops::needs_grad(b.t);
    // the operands the rule reads, for the gradients wanted
    bool keep_a = op != OpKind::Add && op != OpKind::Sub && op != OpKind::Div;
    bool keep_b = op != OpKind::Add && op != OpKind::Sub;
    if (op == OpKind::Mul) keep_a = gb, keep_b = ga;
    if (op == OpKind::Remainder) keep_a = keep_b = gb;
    ops::record_grad(out, name, {a.t, b.t},
                     [op, ga, gb, sa = keep_a ? SavedOperand(name, a, common) : SavedOperand(),
                      sb = keep_b ? SavedOperand(name, b, common) : SavedOperand(),
                      y = ops::SavedResult(out)](const Tensor& g) {
                       auto [da, db] = binary_vjp(op, g, sa, sb, y.get(), ga, gb);
                       return std::vector<Tensor>{da, db};
                     });
  }
  return out;
}

Operand T(const Tensor& t) {
  return {&t, nullptr};
}
Operand S(const Scalar& s) {
  return {nullptr, &s};
}

Tensor where_impl(const Tensor& cond, Operand a, Operand b) {
  trace::OpScope scope;
  ops::check_defined("where", cond, "condition");
  if (a.t) ops::check_defined("where", *a.t, "input");
  if (b.t) ops::check_defined("where", *b.t, "other");
  if (cond.dtype() != DType::bool_)
    fail("where", "the condition must be a bool tensor, got ", ops::type_of(cond),
         "; compare first (t > 0) or convert with astype(t, lt::bool_).");
  DType common = ops::result_type({a.promote(), b.promote()});
  Shape shape = ir::broadcast_shapes("where", cond.shape(), a.shape());
  shape = ir::broadcast_shapes("where", shape, b.shape());
  Tensor out = trace::make_pending(ir::make_node(OpKind::Where, common, shape, trace::node_of(cond),
                                                 a.node(common, "where"), b.node(common, "where")));
  if (ops::needs_grad(a.t, b.t))
    ops::record_grad(out, "where", {nullptr, a.t, b.t},
                     [s = ops::SavedInput("where", cond)](const Tensor& g) {
                       const Tensor& c = s.get();
                       return std::vector<Tensor>{Tensor(), where(c, g, 0), where(c, 0, g)};
                     });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Add, T(a), T(b));
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Sub, T(a), T(b));
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Mul, T(a), T(b));
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Div, T(a), T(b));
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Pow, T(a), T(b));
}
Tensor pow(const Tensor& a, Scalar b) {
  if (a.defined() && (a.dtype() == DType::int32 || a.dtype() == DType::int64) &&
      b.kind() != DType::bool_ && !is_floating(b.kind()) && b.to_double() < 0)
    fail("pow", "integers to negative integer powers are not allowed (", a.type_str(), " to the ",
         b.to_double(),
         "): the result is not an integer. Convert the base to a floating dtype "
         "first (astype(t, lt::float32)).");
  // As PyTorch does, a floating tensor to the power 2, 3, -1, -2, 0.5 or -0.5 multiplies,
  // divides or takes a square root (a general power is a libm call per element, 65x the
  // cost of x * x): the same values up to rounding, except that with 0.5 and -0.5, -0 and
  // -inf give what sqrt and rsqrt give (-0 and NaN; +inf and +0 for -0.5).
  if (a.defined() && is_floating(a.dtype()) && b.kind() != DType::bool_) {
    const double e = b.to_double();
    if (e == 2) return a * a;
    if (e == 3) return a * a * a;
    if (e == -1) return 1 / a;
    if (e == -2) return 1 / (a * a);
    if (e == 0.5) return sqrt(a);
    if (e == -0.5) return rsqrt(a);
  }
  return binary(OpKind::Pow, T(a), S(b));
}
Tensor pow(Scalar a, const Tensor& b) {
  return binary(OpKind::Pow, S(a), T(b));
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Maximum, T(a), T(b));
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Minimum, T(a), T(b));
}
Tensor atan2(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Atan2, T(a), T(b));
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return binary(OpKind::FloorDiv, T(a), T(b));
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  return binary(OpKind::FloorDiv, T(a), S(b));
}
Tensor floor_divide(Scalar a, const Tensor& b) {
  return binary(OpKind::FloorDiv, S(a), T(b));
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Remainder, T(a), T(b));
}
Tensor remainder(const Tensor& a, Scalar b) {
  return binary(OpKind::Remainder, T(a), S(b));
}
Tensor remainder(Scalar a, const Tensor& b) {
  return binary(OpKind::Remainder, S(a), T(b));
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Eq, T(a), T(b));
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Ne, T(a), T(b));
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Lt, T(a), T(b));
}
Tensor le(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Le, T(a), T(b));
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Gt, T(a), T(b));
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return binary(OpKind::Ge, T(a), T(b));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return where_impl(cond, T(a), T(b));
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  return where_impl(cond, T(a), S(b));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  return where_impl(cond, S(a), T(b));
}
Tensor where(const Tensor& cond, Scalar a, Scalar b) {
  return where_impl(cond, S(a), S(b));
}

#define LT_DEFINE_OPERATOR(OP, KIND)                     \
  Tensor operator OP(const Tensor& a, const Tensor& b) { \
    return binary(OpKind::KIND, T(a), T(b));             \
  }                                                      \
  Tensor operator OP(const Tensor& a, Scalar b) {        \
    return binary(OpKind::KIND, T(a), S(b));             \
  }                                                      \
  Tensor operator OP(Scalar a, const Tensor& b) {        \
    return binary(OpKind::KIND, S(a), T(b));             \
  }
LT_DEFINE_OPERATOR(+, Add)
LT_DEFINE_OPERATOR(-, Sub)
LT_DEFINE_OPERATOR(*, Mul)
LT_DEFINE_OPERATOR(/, Div)
LT_DEFINE_OPERATOR(==, Eq)
LT_DEFINE_OPERATOR(!=, Ne)
LT_DEFINE_OPERATOR(<, Lt)
LT_DEFINE_OPERATOR(<=, Le)
LT_DEFINE_OPERATOR(>, Gt)
LT_DEFINE_OPERATOR(>=, Ge)
#undef LT_DEFINE_OPERATOR

}  // namespace lazytrace
