#pragma once
// The inner loops of sum, mean and amax over a contiguous row of float32 values (reduce.cpp),
// in 16 partial results, value j going to partial j % 16 (the tail's to partial 0), then
// combined pairwise in a fixed order. Each partial is its own chain that no compiler
// reorders, so the baseline loops and their AVX2 and AVX-512 copies (one lane per partial)
// compute the same bits.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_features.h"

namespace lazytrace::cpu {

namespace row {

// 16 partials as two vectors of 8 lanes (GCC's vector extensions, lane-wise semantics: the
// baseline computes each lane as a scalar, AVX2 and AVX-512 as one register).
typedef float F8 __attribute__((vector_size(32)));
typedef double D8 __attribute__((vector_size(64)));
constexpr int kParts = 16;

// the larger of acc and v; NaN where either is
[[gnu::always_inline]] inline float max_nan(float acc, float v) {
  return (v > acc || v != v) ? v : acc;
}

}  // namespace row

/** The sum in float64. */
[[gnu::always_inline]] inline double sum_row_f32_inline(const float* x, int64_t n) {
  row::D8 acc[2] = {};
  int64_t j = 0;
  for (; j + row::kParts <= n; j += row::kParts)
    for (int h = 0; h < 2; ++h) {
      row::F8 v;  // by memcpy: a function returning a vector would change the baseline's ABI
      std::memcpy(&v, x + j + 8 * h, sizeof v);
      acc[h] += __builtin_convertvector(v, row::D8);
    }
  double a[row::kParts];
  std::memcpy(a, acc, sizeof a);
  for (; j < n; ++j) a[0] += static_cast<double>(x[j]);
  for (int w = row::kParts / 2; w >= 1; w /= 2)
    for (int q = 0; q < w; ++q) a[q] += a[q + w];
  return a[0];
}

/** The largest value, NaN where there is one (then which NaN is unspecified); -inf if n == 0. */
[[gnu::always_inline]] inline float max_row_f32_inline(const float* x, int64_t n) {
  row::F8 acc[2] = {row::F8{} - HUGE_VALF, row::F8{} - HUGE_VALF};
  int64_t j = 0;
  for (; j + row::kParts <= n; j += row::kParts)
    for (int h = 0; h < 2; ++h) {
      row::F8 v;
      std::memcpy(&v, x + j + 8 * h, sizeof v);
      acc[h] = (v > acc[h]) | (v != v) ? v : acc[h];
    }
  float a[row::kParts];
  std::memcpy(a, acc, sizeof a);
  for (; j < n; ++j) a[0] = row::max_nan(a[0], x[j]);
  for (int w = row::kParts / 2; w >= 1; w /= 2)
    for (int q = 0; q < w; ++q) a[q] = row::max_nan(a[q], a[q + w]);
  return a[0];
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
