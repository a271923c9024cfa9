#pragma once
// float32 products with few rows or a short reduction, by AVX2 + FMA kernels that read the
// weight where it lies instead of packing it (small_gemm_avx2.cpp), or their AVX-512 copies
// (small_gemm_avx512.cpp). At a transformer's
// small batch, x Wᵀ has 16 rows and a weight gradient Xᵀ dY a reduction of 16: BLAS then
// spends more time packing the weight, and zeroing C before accumulating into it, than
// multiplying.
#include <cstdint>

#include "backends/cpu/cpu_features.h"

namespace lazytrace::cpu {

/**
 * Memory the caller reads right after a product (an AdamW update's parameter and moments,
 * after the gradient block it multiplies): up to three streams of `bytes` each, which the
 * short-reduction kernels prefetch into L2 a line per reduction step while they compute.
 * They leave the memory bus idle otherwise, and the update then waits on every line.
 */
struct ReadAhead {
  const void* stream[3] = {nullptr, nullptr, nullptr};
  int64_t bytes = 0;
  int64_t done = 0;  // bytes of each stream asked for so far
};

/**
 * C[m, n] (row stride ldc) = A[m, k] B[k, n], with A's element (i, p) at A[i * ars + p * acs]
 * and B's (p, j) at B[p * brs + j * bcs]. Runs and returns true for the layouts and sizes
 * where it beats BLAS: at most 32 rows with both operands contiguous along k (x Wᵀ), or a
 * reduction of at most 32 with B contiguous along n (Xᵀ dY, dYᵀ X), or at most 32 rows with
 * A contiguous along k and B along n (dY W). Returns false, touching nothing, otherwise. Call only
 * where has_avx2_fma().
 */
bool small_gemm_f32(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs,
                    const float* B, int64_t brs, int64_t bcs, float* C, int64_t ldc,
                    ReadAhead* ahead = nullptr);
/** small_gemm_f32 in AVX-512: the same shapes and layouts. Call only where has_avx512(). */
bool small_gemm_f32_avx512(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars,
                           int64_t acs, const float* B, int64_t brs, int64_t bcs, float* C,
                           int64_t ldc, ReadAhead* ahead = nullptr);

}  // namespace lazytrace::cpu
