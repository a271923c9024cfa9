#pragma once
// The inner loops of sum, mean and amax over a contiguous row of float32 values (reduce.cpp),
// in 16 partial results, value j going to partial j % 16 (the tail's to partial 0), then
// combined pairwise in a fixed order; a row shorter than 16 is summed in order, its maximum
// taken in 4 partials. Each partial is its own chain that no compiler reorders, so the
// baseline loops and their AVX2 and AVX-512 copies (one lane per partial) compute the same
// bits.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_features.h"

namespace lazytrace::cpu {

namespace row {

// 16 partials as vectors (GCC's vector extensions, lane-wise semantics: the baseline computes
// each lane as a scalar, AVX2 and AVX-512 as one register): a float max's as two of 8 lanes,
// a float64 sum's as four of 4 (one AVX2 register each, which the compiler keeps in
// registers where it spills vectors of 8 doubles through memory). The partials
// are combined in registers, halves lane by lane, in the order of a loop over an array
// (a[q] op= a[q + w] for w = 8, 4, 2, 1): through memory, each scalar read of a vector just
// stored waits for the store.
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef float F2 __attribute__((vector_size(8)));
typedef double D4 __attribute__((vector_size(32)));
typedef double D2 __attribute__((vector_size(16)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef int32_t I2 __attribute__((vector_size(8)));
constexpr int kParts = 16;

// the larger of acc and v; NaN where either is; without branches (a row of random values
// would mispredict them)
[[gnu::always_inline]] inline float max_nan(float acc, float v) {
  uint32_t a, b;
  std::memcpy(&a, &acc, 4);
  std::memcpy(&b, &v, 4);
  const uint32_t take = 0u - static_cast<uint32_t>((v > acc) | (v != v));
  const uint32_t r = (b & take) | (a & ~take);
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}

// acc = max_nan(acc, v) lane by lane (I: lanes of V's width; by reference: a function taking
// or returning a vector would change the baseline's ABI)
template <typename V, typename I>
[[gnu::always_inline]] inline void max_nan_into(V& acc, const V& v) {
  const I take = (v > acc) | (v != v);
  acc = take ? v : acc;
}

}  // namespace row

/** The sum in float64. */
[[gnu::always_inline]] inline double sum_row_f32_inline(const float* x, int64_t n) {
  if (n < row::kParts) {  // every value in partial 0; the others, +0.0, change no bit
    double a = 0;
    for (int64_t j = 0; j < n; ++j) a += static_cast<double>(x[j]);
    return a;
  }
  row::D4 acc[4] = {};  // partials 0-3, 4-7, 8-11, 12-15
  int64_t j = 0;
  for (; j + row::kParts <= n; j += row::kParts)
    for (int q = 0; q < 4; ++q) {
      row::F4 v;  // by memcpy: a function returning a vector would change the baseline's ABI
      std::memcpy(&v, x + j + 4 * q, sizeof v);
      acc[q] += __builtin_convertvector(v, row::D4);
    }
  double a0 = acc[0][0];
  for (; j < n; ++j) a0 += static_cast<double>(x[j]);
  acc[0][0] = a0;
  acc[0] += acc[2];  // w = 8
  acc[1] += acc[3];
  acc[0] += acc[1];  // w = 4
  const row::D2 s2 =
      __builtin_shufflevector(acc[0], acc[0], 0, 1) + __builtin_shufflevector(acc[0], acc[0], 2, 3);
  return s2[0] + s2[1];
}

/** The largest value, NaN where there is one (then which NaN is unspecified); -inf if n == 0. */
[[gnu::always_inline]] inline float max_row_f32_inline(const float* x, int64_t n) {
  if (n < row::kParts) {  // value j in partial j % 4 up to the last whole 4, the rest after
    row::F4 acc4 = row::F4{} - HUGE_VALF;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      row::F4 v;
      std::memcpy(&v, x + j, sizeof v);
      row::max_nan_into<row::F4, row::I4>(acc4, v);
    }
    row::F2 m2 = __builtin_shufflevector(acc4, acc4, 0, 1);
    row::max_nan_into<row::F2, row::I2>(m2, __builtin_shufflevector(acc4, acc4, 2, 3));
    float a = row::max_nan(m2[0], m2[1]);
    for (; j < n; ++j) a = row::max_nan(a, x[j]);
    return a;
  }
  row::F8 acc[2] = {row::F8{} - HUGE_VALF, row::F8{} - HUGE_VALF};
  int64_t j = 0;
  for (; j + row::kParts <= n; j += row::kParts)
    for (int h = 0; h < 2; ++h) {
      row::F8 v;
      std::memcpy(&v, x + j + 8 * h, sizeof v);
      row::max_nan_into<row::F8, row::I8>(acc[h], v);
    }
  float a0 = acc[0][0];
  for (; j < n; ++j) a0 = row::max_nan(a0, x[j]);
  acc[0][0] = a0;
  row::max_nan_into<row::F8, row::I8>(acc[0], acc[1]);
  row::F4 m4 = __builtin_shufflevector(acc[0], acc[0], 0, 1, 2, 3);
  row::max_nan_into<row::F4, row::I4>(m4, __builtin_shufflevector(acc[0], acc[0], 4, 5, 6, 7));
  row::F2 m2 = __builtin_shufflevector(m4, m4, 0, 1);
  row::max_nan_into<row::F2, row::I2>(m2, __builtin_shufflevector(m4, m4, 2, 3));
  return row::max_nan(m2[0], m2[1]);
}

// The copies in elementwise_avx2.cpp and elementwise_avx512.cpp; call only where
// has_avx2_fma() / has_avx512().
double sum_row_f32_avx2(const float* x, int64_t n);
double sum_row_f32_avx512(const float* x, int64_t n);
float max_row_f32_avx2(const float* x, int64_t n);
float max_row_f32_avx512(const float* x, int64_t n);

/** sum_row_f32_inline in the widest copy this CPU runs. */
inline double sum_row_f32(const float* x, int64_t n) {
  if (has_avx512()) return sum_row_f32_avx512(x, n);
  if (has_avx2_fma()) return sum_row_f32_avx2(x, n);
  return sum_row_f32_inline(x, n);
}

/** max_row_f32_inline in the widest copy this CPU runs. */
inline float max_row_f32(const float* x, int64_t n) {
  if (has_avx512()) return max_row_f32_avx512(x, n);
  if (has_avx2_fma()) return max_row_f32_avx2(x, n);
  return max_row_f32_inline(x, n);
}

}  // namespace lazytrace::cpu
