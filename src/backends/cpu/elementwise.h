#pragma once
// The elementwise loops of the fused kernel: one op over a register of n values. Always
// inlined, so each file that includes this compiles its own copy for its instruction set:
// fused.cpp for the baseline, elementwise_avx2.cpp and elementwise_avx512.cpp for float32.
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/math.h"
#include "core/check.h"
#include "ir/op.h"

namespace lazytrace::cpu {

// The AVX2 and AVX-512 copies (elementwise_avx2.cpp, elementwise_avx512.cpp): the same
// operations lane by lane, FMA only where math.h asks for one (math::fma), so every CPU
// computes the same bits. Call only where has_avx2_fma() / has_avx512() (cpu_features.h).
void unary_f32_avx2(ir::OpKind op, float* d, const float* a, int64_t n);
void binary_f32_avx2(ir::OpKind op, float* d, const float* a, const float* b, int64_t n);
void binary_scalar_f32_avx2(ir::OpKind op, float* d, const float* a, bool a_one, const float* b,
                            bool b_one, int64_t n);
void unary_f32_avx512(ir::OpKind op, float* d, const float* a, int64_t n);
void binary_f32_avx512(ir::OpKind op, float* d, const float* a, const float* b, int64_t n);
void binary_scalar_f32_avx512(ir::OpKind op, float* d, const float* a, bool a_one, const float* b,
                              bool b_one, int64_t n);

namespace elementwise {

using ir::OpKind;

// The cases come from ir/ops.def: an op added there is dispatched here (its math in
// math.h), every other kind is an internal error.
template <typename T>
[[gnu::always_inline]] inline void unary(OpKind op, T* d, const T* a, int64_t n) {
  switch (op) {
#define LT_OP(kind, name, family, arity)
#define LT_UNARY_OP(K, name)                                             \
  case OpKind::K:                                                        \
    for (int64_t j = 0; j < n; ++j) d[j] = math::unary(OpKind::K, a[j]); \
    return;
#include "ir/ops.def"
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_UNARY_OP(kind, name)
#include "ir/ops.def"
    LT_UNREACHABLE("elementwise::unary runs a unary op");
  }
}

template <typename T>
[[gnu::always_inline]] inline void binary(OpKind op, T* d, const T* a, const T* b, int64_t n) {
  switch (op) {
#define LT_OP(kind, name, family, arity)
#define LT_BINARY_OP(K, name)                                                   \
  case OpKind::K:                                                               \
    for (int64_t j = 0; j < n; ++j) d[j] = math::binary(OpKind::K, a[j], b[j]); \
    return;
#include "ir/ops.def"
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_BINARY_OP(kind, name)
#include "ir/ops.def"
    LT_UNREACHABLE("elementwise::binary runs a binary op");
  }
}

// Binary ops with one operand (or both) a single value, without filling a register with
// it: the common shape of optimizer updates and scaled activations.
template <typename T>
[[gnu::always_inline]] inline void binary_scalar(OpKind op, T* d, const T* a, bool a_one,
                                                 const T* b, bool b_one, int64_t n) {
  switch (op) {
#define LT_OP(kind, name, family, arity)
#define LT_BINARY_OP(K, name)                                                  \
  case OpKind::K:                                                              \
    if (a_one && b_one) {                                                      \
      d[0] = math::binary(OpKind::K, a[0], b[0]);                              \
    } else if (a_one) {                                                        \
      const T x = a[0];                                                        \
      for (int64_t j = 0; j < n; ++j) d[j] = math::binary(OpKind::K, x, b[j]); \
    } else {                                                                   \
      const T y = b[0];                                                        \
      for (int64_t j = 0; j < n; ++j) d[j] = math::binary(OpKind::K, a[j], y); \
    }                                                                          \
    return;
#include "ir/ops.def"
#define LT_OP(kind, name, family, arity) case OpKind::kind:
#define LT_BINARY_OP(kind, name)
#include "ir/ops.def"
    LT_UNREACHABLE("elementwise::binary runs a binary op");
  }
}

}  // namespace elementwise
}  // namespace lazytrace::cpu
