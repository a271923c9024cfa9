#pragma once
// The elementwise loops of the fused kernel: one op over a register of n values. Always
// inlined, so each file that includes this compiles its own copy for its instruction set:
// fused.cpp for the baseline, elementwise_avx2.cpp and elementwise_avx512.cpp for float32.
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/math.h"
#include "ir/op.h"

namespace lazytrace::cpu {

// The AVX2 and AVX-512 copies (elementwise_avx2.cpp, elementwise_avx512.cpp): the same
// operations lane by lane, no FMA, so every CPU computes the same bits. Call only where
// has_avx2() / has_avx512() (cpu_features.h).
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

template <typename T>
[[gnu::always_inline]] inline void unary(OpKind op, T* d, const T* a, int64_t n) {
#define LT_UNARY(K)                                                      \
  case OpKind::K:                                                        \
    for (int64_t j = 0; j < n; ++j) d[j] = math::unary(OpKind::K, a[j]); \
    return;
  // (clang-format does not settle on a list of macro cases)
  // clang-format off
  switch (op) {
    LT_UNARY(Neg)
    LT_UNARY(Exp)
    LT_UNARY(Log)
    LT_UNARY(Sin)
    LT_UNARY(Cos)
    LT_UNARY(Tanh)
    LT_UNARY(Sigmoid)
    LT_UNARY(Relu)
    LT_UNARY(Gelu)
    LT_UNARY(Silu)
    LT_UNARY(Sqrt)
    LT_UNARY(Rsqrt)
    LT_UNARY(Abs)
    LT_UNARY(Erf)
    default: return;
  }
    // clang-format on
#undef LT_UNARY
}

template <typename T>
[[gnu::always_inline]] inline void binary(OpKind op, T* d, const T* a, const T* b, int64_t n) {
#define LT_BINARY(K)                                                            \
  case OpKind::K:                                                               \
    for (int64_t j = 0; j < n; ++j) d[j] = math::binary(OpKind::K, a[j], b[j]); \
    return;
  switch (op) {
    LT_BINARY(Add)
    LT_BINARY(Sub)
    LT_BINARY(Mul)
    LT_BINARY(Div) LT_BINARY(Pow) LT_BINARY(Maximum) LT_BINARY(Minimum) default : return;
  }
#undef LT_BINARY
}

// Binary ops with one operand (or both) a single value, without filling a register with
// it: the common shape of optimizer updates and scaled activations.
template <typename T>
[[gnu::always_inline]] inline void binary_scalar(OpKind op, T* d, const T* a, bool a_one,
                                                 const T* b, bool b_one, int64_t n) {
#define LT_BINARY_S(K)                                                         \
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
  switch (op) {
    LT_BINARY_S(Add)
    LT_BINARY_S(Sub)
    LT_BINARY_S(Mul)
    LT_BINARY_S(Div) LT_BINARY_S(Pow) LT_BINARY_S(Maximum) LT_BINARY_S(Minimum) default : return;
  }
#undef LT_BINARY_S
}

}  // namespace elementwise
}  // namespace lazytrace::cpu
