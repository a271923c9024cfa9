// small_gemm.h's kernels in AVX-512, compiled with -mavx512f -mavx512dq -mfma for this file
// alone (see src/CMakeLists.txt); matmul.cpp calls them first where has_avx512(). Like
// small_gemm_avx2.cpp, the file uses no templates or inline functions from shared headers
// but static ones (its buffers come from small_gemm_scratch), so the linker can never pick
// an AVX-512 copy of a function that other files use too (backend.isa_symbols checks).
//
// With 16 lanes, a transformer's 16 tokens fill one register: the two long-reduction
// kernels pack the few rows of A transposed (Aᵀ[p] = A's column p, one register per p) and
// accumulate Cᵀ, one register per column of C, by broadcasting B's elements from memory
// (the FMA's own load). Nothing is summed across lanes; a 16 x 16 transpose per tile turns
// Cᵀ back into C's rows. Each tile prefetches the weight lines the next tile reads: the
// hardware prefetcher does not follow sixteen short rows at once, and a tile waiting on
// memory ran at a third of the speed.
#include "backends/cpu/small_gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__FMA__)
// GCC 12's own _mm512_undefined_ps (behind _mm512_set1_ps and the shuffles) initializes a
// variable from itself, which -Wmaybe-uninitialized reports at every use
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace lazytrace::cpu {
namespace {

constexpr int64_t kLanes = 16;  // floats per register, and rows of A per group

int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__mmask16 first_lanes(int64_t n) {
  return n >= kLanes ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}

// r[i] (row i of a 16 x 16 block) becomes column i.
[[gnu::always_inline]] inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const int a = (i / 4) * 8 + i % 4;
    t[a] = _mm512_shuffle_f32x4(r[a], r[a + 4], 0x88);
    t[a + 4] = _mm512_shuffle_f32x4(r[a], r[a + 4], 0xdd);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

// Rows [0, m) (m <= 16) of A (row stride lda, contiguous along k) as at[p * 16 + t],
// zero for t >= m.
void pack_transposed(int64_t m, int64_t k, const float* A, int64_t lda, float* at) {
  for (int64_t p = 0; p < k; p += kLanes) {
    const int64_t w = min64(kLanes, k - p);
    const __mmask16 cols = first_lanes(w);
    __m512 r[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t)
      r[t] = t < m ? _mm512_maskz_loadu_ps(cols, A + t * lda + p) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t q = 0; q < w; ++q) _mm512_storeu_ps(at + (p + q) * kLanes, r[q]);
  }
}

// The groups of 16 rows of A (m <= 32), packed transposed, in a per-thread buffer.
const float* pack_groups(int64_t m, int64_t k, const float* A, int64_t lda) {
  const int64_t groups = (m + kLanes - 1) / kLanes;
  float* buf = small_gemm_scratch(0, groups * k * kLanes);
  for (int64_t g = 0; g < groups; ++g)
    pack_transposed(min64(kLanes, m - g * kLanes), k, A + g * kLanes * lda, lda,
                    buf + g * k * kLanes);
  return buf;
}

// Stores Cᵀ's 16 columns (acc, one per column j0 + c) as rows [0, m) of C.
[[gnu::always_inline]] inline void store_transposed(__m512 acc[16], int64_t m, float* C,
                                                    int64_t ldc) {
  transpose16(acc);
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t)
    if (t < m) _mm512_storeu_ps(C + t * ldc, acc[t]);
}

// Column c of C (one register of its 16 rows) into rows [0, m).
void store_column(__m512 col, int64_t m, float* C, int64_t ldc) {
  alignas(64) float v[16];
  _mm512_store_ps(v, col);
  for (int64_t t = 0; t < m; ++t) C[t * ldc] = v[t];
}

// ---- few rows, k contiguous in both (x Wᵀ): C[t, j] = sum_p A[t, p] W[j, p] -------------

// Eight columns of Cᵀ over the whole reduction: acc[c] += W[j0 + c, p] * Aᵀ[p]. With
// `next` set, iteration p also prefetches line p of the next tile (16 rows from `next`).
template <bool Prefetch>
[[gnu::always_inline]] inline void dot_columns8(int64_t k, const float* at, const float* W,
                                                int64_t ldw, __m512* acc, const float* next,
                                                const char* shadow) {
  const float* w[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    w[c] = W + c * ldw;
    acc[c] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 a = _mm512_loadu_ps(at + p * kLanes);
    if constexpr (Prefetch) {
      const int64_t line = (p & 15) * ldw + (p & ~int64_t{15});
      if (next != nullptr) _mm_prefetch(next + line, _MM_HINT_T0);
      if (shadow != nullptr) _mm_prefetch(shadow + line * 4, _MM_HINT_T1);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[c][p]), a, acc[c]);
  }
}

void gemm_dot(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* W,
              int64_t ldw, float* C, int64_t ldc, int64_t shadow) {
  const float* at = pack_groups(m, k, A, lda);
  const int64_t groups = (m + kLanes - 1) / kLanes;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const float* tile = W + j * ldw;
    for (int64_t g = 0; g < groups; ++g) {
      __m512 acc[16];
      const float* ag = at + g * k * kLanes;
      // the first group brings in the next tile, and this tile's shadow
      const float* next = j + 32 <= n ? tile + 16 * ldw : nullptr;
      const char* tile_shadow =
          shadow != 0 ? reinterpret_cast<const char*>(tile) + shadow : nullptr;
      if (g == 0 && (next != nullptr || tile_shadow != nullptr))
        dot_columns8<true>(k, ag, tile, ldw, acc, next, tile_shadow);
      else
        dot_columns8<false>(k, ag, tile, ldw, acc, nullptr, nullptr);
      dot_columns8<false>(k, ag, tile + 8 * ldw, ldw, acc + 8, nullptr, nullptr);
      store_transposed(acc, min64(kLanes, m - g * kLanes), C + g * kLanes * ldc + j, ldc);
    }
  }
  for (; j < n; ++j)  // the last n % 16 columns, one at a time
    for (int64_t g = 0; g < groups; ++g) {
      const float* ag = at + g * k * kLanes;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t p = 0; p < k; ++p)
        acc =
            _mm512_fmadd_ps(_mm512_set1_ps(W[j * ldw + p]), _mm512_loadu_ps(ag + p * kLanes), acc);
      store_column(acc, min64(kLanes, m - g * kLanes), C + g * kLanes * ldc + j, ldc);
    }
}

// ---- few rows, B contiguous along n, a long reduction (dY W) -----------------------------
// B is read once, in blocks of about 32 KB of rows in memory order; Cᵀ (16 tokens per
// column) stays in a per-thread buffer between blocks, and every tile of a block
// prefetches the same tile of the next block.

constexpr int64_t kBlockFloats = 8192;

template <bool Prefetch>
[[gnu::always_inline]] inline void stream_tile(int64_t p0, int64_t p1, const float* at,
                                               const float* B, int64_t ldb, float* ct,
                                               int64_t ahead, ReadAhead* also) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c)
    acc[c] = p0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(ct + c * kLanes);
  for (int64_t p = p0; p < p1; ++p) {
    const __m512 a = _mm512_loadu_ps(at + p * kLanes);
    const float* b = B + p * ldb;
    if constexpr (Prefetch) _mm_prefetch(b + ahead, _MM_HINT_T0);
    read_ahead(also);
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(b[c]), a, acc[c]);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) _mm512_storeu_ps(ct + c * kLanes, acc[c]);
}

void gemm_stream(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, ReadAhead* also) {
  const float* at = pack_groups(m, k, A, lda);
  const int64_t groups = (m + kLanes - 1) / kLanes;
  float* ct = small_gemm_scratch(1, groups * n * kLanes);  // Cᵀ of each group: [groups][n][16]
  const int64_t rows = kBlockFloats / n > 16 ? kBlockFloats / n : 16;
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t p0 = 0; p0 < k; p0 += rows) {
    const int64_t p1 = min64(p0 + rows, k);
    const bool more = p1 < k;
    for (int64_t g = 0; g < groups; ++g) {
      const float* ag = at + g * k * kLanes;
      float* cg = ct + g * n * kLanes;
      for (int64_t j = 0; j < n16; j += 16) {
        if (g == 0 && more)
          stream_tile<true>(p0, p1, ag, B + j, ldb, cg + j * kLanes, rows * ldb, also);
        else
          stream_tile<false>(p0, p1, ag, B + j, ldb, cg + j * kLanes, 0, also);
      }
      for (int64_t j = n16; j < n; ++j) {  // the last n % 16 columns
        __m512 acc = p0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(cg + j * kLanes);
        for (int64_t p = p0; p < p1; ++p)
          acc = _mm512_fmadd_ps(_mm512_set1_ps(B[p * ldb + j]), _mm512_loadu_ps(ag + p * kLanes),
                                acc);
        _mm512_storeu_ps(cg + j * kLanes, acc);
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t mg = min64(kLanes, m - g * kLanes);
    const float* cg = ct + g * n * kLanes;
    float* c = C + g * kLanes * ldc;
    for (int64_t j = 0; j < n16; j += 16) {
      __m512 acc[16];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) acc[q] = _mm512_loadu_ps(cg + (j + q) * kLanes);
      store_transposed(acc, mg, c + j, ldc);
    }
    for (int64_t j = n16; j < n; ++j)
      store_column(_mm512_loadu_ps(cg + j * kLanes), mg, c + j, ldc);
  }
}

// ---- short reduction, B contiguous along n: C[i, :] = sum_p A[i, p] B[p, :] --------------
// An MR x (16 * NV) tile: each step of p broadcasts MR values of A against NV registers of
// B's row p; the last n % 16 columns through masks. A large C, which will not be read again
// soon, is written with streaming stores.

template <int MR, int NV, bool Stream>
[[gnu::always_inline]] inline void bcast_tile(int64_t k, const float* A, int64_t ars, int64_t acs,
                                              const float* B, int64_t ldb, float* C, int64_t ldc,
                                              __mmask16 last, ReadAhead* ahead) {
  __m512 c[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    read_ahead(ahead);
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, B + p * ldb + 16 * v)
                         : _mm512_loadu_ps(B + p * ldb + 16 * v);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(A[i * ars + p * acs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* dst = C + i * ldc + 16 * v;
      if (v == NV - 1 && last != 0xffff)
        _mm512_mask_storeu_ps(dst, last, c[i][v]);
      else if constexpr (Stream)
        _mm512_stream_ps(dst, c[i][v]);
      else
        _mm512_storeu_ps(dst, c[i][v]);
    }
}

// Columns [0, 16 * NV) of every row of C, the last register's columns masked by `last`:
// a column chunk's rows of B (k x 64 floats at most) stay in L1 while the row tiles walk
// down A.
template <int NV, bool Stream>
void bcast_chunk(int64_t m, int64_t k, const float* A, int64_t ars, int64_t acs, const float* B,
                 int64_t ldb, float* C, int64_t ldc, __mmask16 last, ReadAhead* ahead) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6)
    bcast_tile<6, NV, Stream>(k, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc, last, ahead);
  const float* a = A + i * ars;
  float* c = C + i * ldc;
  switch (m - i) {
    case 5:
      return bcast_tile<5, NV, Stream>(k, a, ars, acs, B, ldb, c, ldc, last, ahead);
    case 4:
      return bcast_tile<4, NV, Stream>(k, a, ars, acs, B, ldb, c, ldc, last, ahead);
    case 3:
      return bcast_tile<3, NV, Stream>(k, a, ars, acs, B, ldb, c, ldc, last, ahead);
    case 2:
      return bcast_tile<2, NV, Stream>(k, a, ars, acs, B, ldb, c, ldc, last, ahead);
    case 1:
      return bcast_tile<1, NV, Stream>(k, a, ars, acs, B, ldb, c, ldc, last, ahead);
    default:
      return;
  }
}

template <bool Stream>
void gemm_bcast(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs,
                const float* B, int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64)
    bcast_chunk<4, Stream>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, 0xffff, ahead);
  if (j + 32 <= n) {
    bcast_chunk<2, Stream>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, 0xffff, ahead);
    j += 32;
  }
  for (; j < n; j += 16)
    bcast_chunk<1, Stream>(m, k, A, ars, acs, B + j, ldb, C + j, ldc, first_lanes(n - j), ahead);
}

}  // namespace

const SmallGemmKernels* small_gemm_avx512() {
  static const SmallGemmKernels kernels{gemm_dot, gemm_bcast<false>, gemm_bcast<true>, gemm_stream,
                                        16};
  return &kernels;
}

}  // namespace lazytrace::cpu

#else  // another CPU, or a compiler without AVX-512: the AVX2 kernels or BLAS

namespace lazytrace::cpu {
const SmallGemmKernels* small_gemm_avx512() {
  return nullptr;
}
}  // namespace lazytrace::cpu

#endif
