// PyTorch's type promotion (torch.result_type): tensors with dims outrank 0-d tensors,
// which outrank plain numbers, unless a lower rank brings a higher category
// (bool < integer < floating).
#include <array>
#include <cstdint>
#include <cstring>

#include "ops/op_helpers.h"
#include "runtime/passes.h"

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

namespace {

// The constant nodes of this thread's recent numbers (pass share_scalars): `x * 0.5` in a
// loop, or a layer's scale, is one node shared by the ops that use it, not a node per op
// (torch_xla keeps such a cache of scalars too). A number joins at its second use, so that
// numbers used once cost next to nothing more. The graph a program records must not depend
// on the values of its numbers beyond which are equal (an optimizer's step size changes
// every step), nor on what it recorded before (its second step would compile again): so
// the numbers held are the last ones to join, whatever their values, they start afresh at
// each sync, and a traced function (recorded once, at its first call) neither takes nor
// leaves any.
class RecentNumbers {
 public:
  ir::NodePtr get(double value, int64_t ivalue, DType dtype) {
    if (syncs_ != trace::g_syncs_started) *this = RecentNumbers(trace::g_syncs_started);
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    // a key for (value, ivalue, dtype), never 0: equal keys of other numbers are told apart
    const uint64_t key = ((bits ^ static_cast<uint64_t>(ivalue) * 0x9e3779b97f4a7c15ULL ^
                           static_cast<uint64_t>(dtype) << 56) *
                          0xff51afd7ed558ccdULL) |
                         1;
    for (unsigned i = 0; i < kHeld; ++i)
      if (held_key_[i] == key) {
        const ir::Node& n = *held_[i];
        if (n.op == ir::OpKind::Scalar && n.dtype == dtype && n.ivalue == ivalue &&
            std::memcmp(&n.value, &bits, sizeof bits) == 0)
          return held_[i];
      }
    ir::NodePtr made = ir::make_scalar(value, ivalue, dtype);
    for (uint64_t k : seen_)
      if (k == key) {  // its second use: it joins, in place of the oldest
        const unsigned i = next_held_++ % kHeld;
        held_key_[i] = key;
        held_[i] = made;
        return made;
      }
    seen_[next_seen_++ % kSeen] = key;
    return made;
  }
  explicit RecentNumbers(uint32_t syncs = 0) : syncs_(syncs) {}

 private:
  static constexpr unsigned kHeld = 8, kSeen = 8;
  std::array<uint64_t, kHeld> held_key_{};
  std::array<ir::NodePtr, kHeld> held_;
  std::array<uint64_t, kSeen> seen_{};  // the latest numbers used once
  unsigned next_held_ = 0, next_seen_ = 0;
  uint32_t syncs_ = 0;  // trace::g_syncs_started when these were recorded
};

ir::NodePtr shared_constant(double value, int64_t ivalue, DType dtype) {
  if (trace::current_context_id() != 0 || !runtime::current_pass_on(runtime::Pass::ShareScalars))
    return ir::make_scalar(value, ivalue, dtype);
  static thread_local RecentNumbers recent;
  return recent.get(value, ivalue, dtype);
}

// A number in dtype as (value, ivalue): floating to integer truncates toward 0, as torch; an
// integer that does not fit is an error of `op`.
std::pair<double, int64_t> number_in(const Scalar& s, DType dtype, const char* op) {
  if (dtype == DType::bool_) {
    const bool b = s.to_double() != 0;
    return {b, b};
  }
  if (is_floating(dtype)) return {s.to_double(), s.to_int()};
  if (is_floating(s.kind())) {  // NaN, inf or too large: an error
    const double f = s.to_double();
    const double limit = dtype == DType::int32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(f > -limit - 1 && f < limit))
      fail(op, "the number ", f, " cannot be converted to ", dtype_name(dtype),
           " without overflow; use a number in its range, or a floating tensor.");
    const auto v = static_cast<int64_t>(f);
    return {static_cast<double>(v), v};
  }
  const int64_t v = s.to_int();
  // as torch: an integer that does not fit is an error, not a wrapped value (t == 2**32 on
  // an int32 t would compare with 0)
  if (dtype == DType::int32 && s.kind() == DType::int64 && (v < INT32_MIN || v > INT32_MAX))
    fail(op, "the integer ", v, " does not fit in int32 (", INT32_MIN, " to ", INT32_MAX,
         "); convert the tensor first (astype(t, lt::int64)) or use a smaller number.");
  return {static_cast<double>(v), v};
}

}  // namespace

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
  const auto [v, iv] = number_in(s, dtype, op);
  return ir::make_scalar(v, iv, dtype);
}

ir::NodePtr scalar_operand(const Scalar& s, DType dtype, const char* op) {
  const auto [v, iv] = number_in(s, dtype, op);
  return shared_constant(v, iv, dtype);
}

}  // namespace lazytrace::ops
