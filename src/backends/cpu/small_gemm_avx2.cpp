// small_gemm.h's kernels, compiled with -mavx2 -mfma for this file alone (see
// src/CMakeLists.txt); matmul.cpp calls them only where has_avx2_fma(). The file uses no
// templates or inline functions from shared headers but static ones (small_gemm.h's
// read_ahead), so the linker can never pick an AVX2 copy of a function that other files
// use too (the ctest backend.isa_symbols checks).
#include "backends/cpu/small_gemm.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace lazytrace::cpu {
namespace {

// ---- few rows, k contiguous in both: C[i, j] = dot(A row i, B column j) ------------------
// An MR x NR tile of dot products over k, eight lanes at a time, summed across lanes at the
// end. The weight's NR rows stay in L1 while the tile walks down A's rows.

inline float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The lane sums of four vectors, as one vector: three horizontal adds and one add where
// four lane_sums take six instructions each (a k of 128 is only 16 steps of the tile).
inline __m128 lane_sums(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <int MR, int NR>
[[gnu::always_inline]] inline void dot_tile(int64_t k, const float* A, int64_t lda, const float* B,
                                            int64_t ldb, float* C, int64_t ldc) {
  __m256 c[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) c[i][j] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t p = 0; p < k8; p += 8) {
    __m256 b[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) b[j] = _mm256_loadu_ps(B + j * ldb + p);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_loadu_ps(A + i * lda + p);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) c[i][j] = _mm256_fmadd_ps(a, b[j], c[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    if constexpr (NR == 4) {  // the four sums of a row at once, stored together
      __m128 s = lane_sums(c[i][0], c[i][1], c[i][2], c[i][3]);
      if (k8 < k) {
        float tail[4] = {0, 0, 0, 0};
        for (int j = 0; j < 4; ++j)
          for (int64_t p = k8; p < k; ++p) tail[j] += A[i * lda + p] * B[j * ldb + p];
        s = _mm_add_ps(s, _mm_loadu_ps(tail));
      }
      _mm_storeu_ps(C + i * ldc, s);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        float s = lane_sum(c[i][j]);
        for (int64_t p = k8; p < k; ++p) s += A[i * lda + p] * B[j * ldb + p];
        C[i * ldc + j] = s;
      }
    }
  }
}

template <int NR>
void dot_rows(int64_t m, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc) {
  int64_t i = 0;
  for (; i + 3 <= m; i += 3) dot_tile<3, NR>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
  if (m - i == 2) dot_tile<2, NR>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
  if (m - i == 1) dot_tile<1, NR>(k, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
}

// B's column j starts at B + j * ldb. With `shadow`, each four columns first ask for their
// shadow's lines (small_gemm.h).
void gemm_dot(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
              int64_t ldb, float* C, int64_t ldc, int64_t shadow) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    if (shadow != 0)
      for (int64_t c = j; c < j + 4; ++c) {
        const char* col = reinterpret_cast<const char*>(B + c * ldb) + shadow;
        for (int64_t o = 0; o < k * int64_t{sizeof(float)}; o += 64)
          _mm_prefetch(col + o, _MM_HINT_T1);
      }
    dot_rows<4>(m, k, A, lda, B + j * ldb, ldb, C + j, ldc);
  }
  switch (n - j) {
    case 3:
      return dot_rows<3>(m, k, A, lda, B + j * ldb, ldb, C + j, ldc);
    case 2:
      return dot_rows<2>(m, k, A, lda, B + j * ldb, ldb, C + j, ldc);
    case 1:
      return dot_rows<1>(m, k, A, lda, B + j * ldb, ldb, C + j, ldc);
    default:
      return;
  }
}

// ---- short reduction, B contiguous along n: C[i, :] = sum_p A[i, p] B[p, :] --------------
// An MR x (8 * NV) tile: each step of p broadcasts MR values of A against NV vectors of B's
// row p. B (k rows) stays in L1. A large C, which will not be read again soon, is written
// with streaming stores: it then costs one pass over memory instead of a read and a write.

template <int MR, int NV, bool Stream>
[[gnu::always_inline]] inline void bcast_tile(int64_t p0, int64_t p1, const float* A, int64_t ars,
                                              int64_t acs, const float* B, int64_t ldb, float* C,
                                              int64_t ldc, ReadAhead* ahead = nullptr) {
  // reduction steps [p0, p1): from zero at p0 == 0, else adding to what C holds
  __m256 c[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      c[i][v] = p0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(C + i * ldc + 8 * v);
  for (int64_t p = p0; p < p1; ++p) {
    read_ahead(ahead);
    __m256 b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(B + p * ldb + 8 * v);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(A + i * ars + p * acs);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) c[i][v] = _mm256_fmadd_ps(a, b[v], c[i][v]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      if constexpr (Stream)
        _mm256_stream_ps(C + i * ldc + 8 * v, c[i][v]);
      else
        _mm256_storeu_ps(C + i * ldc + 8 * v, c[i][v]);
    }
}

template <int MR, bool Stream>
void bcast_row_tile(int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs, const float* B,
                    int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    bcast_tile<MR, 2, Stream>(0, k, A, ars, acs, B + j, ldb, C + j, ldc, ahead);
  if (j + 8 <= n) {
    bcast_tile<MR, 1, Stream>(0, k, A, ars, acs, B + j, ldb, C + j, ldc, ahead);
    j += 8;
  }
  for (; j < n; ++j)  // the last n % 8 columns
    for (int i = 0; i < MR; ++i) {
      float s = 0;
      for (int64_t p = 0; p < k; ++p) s += A[i * ars + p * acs] * B[p * ldb + j];
      C[i * ldc + j] = s;
    }
}

template <bool Stream>
void gemm_bcast(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs,
                const float* B, int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6)
    bcast_row_tile<6, Stream>(n, k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, ahead);
  const float* a = A + i * ars;
  float* c = C + i * ldc;
  switch (m - i) {
    case 5:
      return bcast_row_tile<5, Stream>(n, k, a, ars, acs, B, ldb, c, ldc, ahead);
    case 4:
      return bcast_row_tile<4, Stream>(n, k, a, ars, acs, B, ldb, c, ldc, ahead);
    case 3:
      return bcast_row_tile<3, Stream>(n, k, a, ars, acs, B, ldb, c, ldc, ahead);
    case 2:
      return bcast_row_tile<2, Stream>(n, k, a, ars, acs, B, ldb, c, ldc, ahead);
    case 1:
      return bcast_row_tile<1, Stream>(n, k, a, ars, acs, B, ldb, c, ldc, ahead);
    default:
      return;
  }
}

// ---- few rows, B contiguous along n, a long reduction: C[i, :] = sum_p A[i, p] B[p, :] ----
// (dY W: a layer's input gradient at few tokens.) B is read once, in blocks of kBlock rows
// in memory order; each block's column panels stay in L1 while every row tile of A
// accumulates into C (bcast_tile over the block's reduction steps), which the tiles load
// back between blocks.

constexpr int64_t kBlock = 64;

// Rows [0, m) of C (m <= 6) over columns [j, j + 8 * NV), reduction rows [p0, p1).
template <int NV>
void accumulate_panel(int64_t m, int64_t p0, int64_t p1, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead) {
  switch (m) {
    case 6:
      return bcast_tile<6, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    case 5:
      return bcast_tile<5, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    case 4:
      return bcast_tile<4, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    case 3:
      return bcast_tile<3, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    case 2:
      return bcast_tile<2, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    case 1:
      return bcast_tile<1, NV, false>(p0, p1, A, lda, 1, B, ldb, C, ldc, ahead);
    default:
      return;
  }
}

void gemm_stream(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead) {
  for (int64_t p0 = 0; p0 < k; p0 += kBlock) {
    const int64_t p1 = p0 + kBlock < k ? p0 + kBlock : k;
    int64_t j = 0;
    for (; j + 8 <= n; j += j + 16 <= n ? 16 : 8)
      for (int64_t i = 0; i < m; i += 6) {
        const int64_t mr = m - i < 6 ? m - i : 6;
        const float* a = A + i * lda;
        float* c = C + i * ldc + j;
        if (j + 16 <= n)
          accumulate_panel<2>(mr, p0, p1, a, lda, B + j, ldb, c, ldc, ahead);
        else
          accumulate_panel<1>(mr, p0, p1, a, lda, B + j, ldb, c, ldc, ahead);
      }
    for (; j < n; ++j)  // the last n % 8 columns
      for (int64_t i = 0; i < m; ++i) {
        float s = p0 == 0 ? 0.0f : C[i * ldc + j];
        for (int64_t p = p0; p < p1; ++p) s += A[i * lda + p] * B[p * ldb + j];
        C[i * ldc + j] = s;
      }
  }
}

}  // namespace

const SmallGemmKernels* small_gemm_avx2() {
  static const SmallGemmKernels kernels{gemm_dot, gemm_bcast<false>, gemm_bcast<true>, gemm_stream,
                                        8};
  return &kernels;
}

}  // namespace lazytrace::cpu

#else  // another CPU: BLAS everywhere

namespace lazytrace::cpu {
const SmallGemmKernels* small_gemm_avx2() {
  return nullptr;
}
}  // namespace lazytrace::cpu

#endif
