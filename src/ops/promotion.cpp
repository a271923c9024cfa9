// PyTorch's type promotion (torch.result_type): tensors with dims outrank 0-d tensors,
// which outrank plain numbers, unless a lower rank brings a higher category
// (bool < integer < floating).
#include <cstdint>
#include "ops/op_helpers.h"

namespace lazytrace::ops {
namespace {

struct Partial {
  bool set = false;
  DType t = DType::bool_;
  void add(DType d) {
    t = set ? promote_types(t, d) : d;
    set = true;
  }
};

Partial combine(Partial higher, Partial lower) {
  if (!higher.set) return lower;
  if (!lower.set) return higher;
  if (is_floating(higher.t)) return higher;
  if (higher.t == DType::bool_ || is_floating(lower.t)) {
    higher.t = promote_types(higher.t, lower.t);
  }
  return higher;
}

}  // namespace

DType result_type(std::initializer_list<PromoteArg> args) {
  Partial dim, zero, wrapped;
  for (const PromoteArg& a : args) {
    switch (a.level) {
      case PromoteArg::Dim:
        dim.add(a.dtype);
        break;
      case PromoteArg::ZeroDim:
        zero.add(a.dtype);
        break;
      case PromoteArg::Wrapped:
        // a plain float is the default dtype (float32), a plain integer int64
        wrapped.add(is_floating(a.dtype) ? DType::float32 : a.dtype);
        break;
    }
  }
  return combine(dim, combine(zero, wrapped)).t;
}

void check_defined(const char* op, const Tensor& t, const char* arg) {
  if (!t.defined())
    fail(op, "argument '", arg,
         "' is an undefined (default-constructed) tensor; pass a tensor made "
         "by an op or lt::tensor().");
}

void SavedInput::overwritten() const {
  fail("backward", "the gradient of ", op_, " reads its input ", t_.type_str(),
       ", which copy_ overwrote after ", op_,
       " used it; the gradient would read the new value. Run backward() before writing, or "
       "write into a clone of the tensor.");
}

ir::NodePtr cast_node(const ir::NodePtr& n, DType dtype) {
  if (n->dtype == dtype) return n;
  if (n->op == ir::OpKind::Scalar) {
    double v = n->value;
    int64_t iv = n->ivalue;
    if (dtype == DType::bool_) {
      v = (v != 0) ? 1 : 0;
      iv = static_cast<int64_t>(v);
    } else if (!is_floating(dtype)) {
      v = static_cast<double>(is_floating(n->dtype) ? static_cast<int64_t>(v) : iv);
      iv = static_cast<int64_t>(v);
    }
    return ir::make_scalar(v, iv, dtype);
  }
  return ir::make_node(ir::OpKind::Cast, dtype, n->shape, n);
}

ir::NodePtr node_as(const Tensor& t, DType dtype) {
  return cast_node(trace::node_of(t), dtype);
}

ir::NodePtr scalar_node(const Scalar& s, DType dtype, const char* op) {
  if (dtype == DType::bool_) {
    bool b = s.to_double() != 0;
    return ir::make_scalar(b, b, dtype);
  }
  if (is_floating(dtype)) return ir::make_scalar(s.to_double(), s.to_int(), dtype);
  if (is_floating(s.kind())) {  // truncated toward 0, as torch; NaN, inf or too large: error
    const double f = s.to_double();
    const double limit = dtype == DType::int32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(f > -limit - 1 && f < limit))
      fail(op, "the number ", f, " cannot be converted to ", dtype_name(dtype),
           " without overflow; use a number in its range, or a floating tensor.");
    const auto v = static_cast<int64_t>(f);
    return ir::make_scalar(static_cast<double>(v), v, dtype);
  }
  const int64_t v = s.to_int();
  // as torch: an integer that does not fit is an error, not a wrapped value (t == 2**32 on
  // an int32 t would compare with 0)
  if (dtype == DType::int32 && s.kind() == DType::int64 && (v < INT32_MIN || v > INT32_MAX))
    fail(op, "the integer ", v, " does not fit in int32 (", INT32_MIN, " to ", INT32_MAX,
         "); convert the tensor first (astype(t, lt::int64)) or use a smaller number.");
  return ir::make_scalar(static_cast<double>(v), v, dtype);
}

}  // namespace lazytrace::ops
