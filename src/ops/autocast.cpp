// Autocast (lazytrace/ops/autocast.h): a thread's state, and the casts the ops that follow
// its policy apply (matmul, the losses).
#include "lazytrace/ops/autocast.h"

#include "lazytrace/core/error.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace {
namespace {

thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::bfloat16;

}  // namespace

AutocastGuard::AutocastGuard(bool enabled, DType dtype)
    : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  if (dtype != DType::bfloat16 && dtype != DType::float16)
    fail("autocast", "dtype must be bfloat16 or float16 (the products' lower precision), got ",
         dtype_name(dtype), ".");
  t_enabled = enabled;
  if (enabled) t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
}

bool is_autocast_enabled() {
  return t_enabled;
}

DType autocast_dtype() {
  return t_dtype;
}

namespace ops {

Tensor autocast_float32(const Tensor& t) {
  if (!t_enabled || !t.defined() || (t.dtype() != DType::bfloat16 && t.dtype() != DType::float16))
    return t;
  return astype(t, DType::float32);
}

Tensor autocast_lower(const Tensor& t) {
  if (!t_enabled || !t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::float64 ||
      t.dtype() == t_dtype)
    return t;
  return astype(t, t_dtype);
}

}  // namespace ops
}  // namespace lazytrace
