// bfloat16 products with few rows on AVX-512 (small_gemm.h, small_gemm_bf16): the operands
// widened to float32 in registers as they are read, multiplied and summed in float32, each
// result rounded once. Built with AVX-512 F, BW and VL; run only where the CPU has them.
#include "backends/cpu/small_gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__FMA__)
// GCC 12 takes the intrinsics' deliberately undefined pass-through operands for
// uninitialized values
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

namespace lazytrace::cpu {
namespace {

// (Everything here has internal linkage or is an intrinsic: an inline function of another
// header compiled here could be the copy the linker keeps for every file; tests/isa_symbols.)
inline int64_t lower(int64_t a, int64_t b) {
  return a < b ? a : b;
}

inline float to_float(BFloat16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// one value rounded as narrow() rounds
inline BFloat16 to_bf16(float f) {
  BFloat16 out;
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    out.bits = static_cast<uint16_t>((x >> 16) | 0x40u);
  else
    out.bits = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  return out;
}

// 16 bfloat16 values (`lanes` of them, the rest 0) as floats: their bits are a float's upper half
inline __m512 widen(const BFloat16* p, int lanes = 16) {
  const __m256i h = lanes == 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                : _mm256_maskz_loadu_epi16((__mmask16{1} << lanes) - 1, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// v rounded to bfloat16, ties to even, a NaN quieted (BFloat16::from_float's bits), `lanes`
// of them stored
inline void narrow(BFloat16* p, __m512 v, int lanes = 16) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, lsb), _mm512_set1_epi32(0x7fff));
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), x,
                           _mm512_set1_epi32(0x00400000));
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
  _mm256_mask_storeu_epi16(p, (__mmask16{1} << lanes) - 1, h);
}

// C[i][j] = dot(A row i, W row j) over k, for MI rows of A and NJ rows of W (B = Wᵀ): 16 of
// the reduction at a time, MI x NJ sums in registers.
template <int MI, int NJ>
void dots(int64_t k, const BFloat16* a, int64_t lda, const BFloat16* w, int64_t ldw, BFloat16* c,
          int64_t ldc) {
  __m512 acc[MI][NJ];
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NJ; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p += 16) {
    const int lanes = static_cast<int>(lower(16, k - p));
    __m512 wv[NJ];
    for (int j = 0; j < NJ; ++j) wv[j] = widen(w + j * ldw + p, lanes);
    for (int i = 0; i < MI; ++i) {
      const __m512 av = widen(a + i * lda + p, lanes);
      for (int j = 0; j < NJ; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NJ; ++j) c[i * ldc + j] = to_bf16(_mm512_reduce_add_ps(acc[i][j]));
}

// C[i][j0 .. j0 + 16 V) = sum_p A[i][p] B[p][j0 ..], for MI rows: B's rows read V vectors of
// 16 columns at a time (`cols` of them, the last vector masked), A's values broadcast.
template <int MI, int V>
void rows(int64_t k, int cols, const BFloat16* a, int64_t ars, int64_t acs, const BFloat16* b,
          int64_t ldb, BFloat16* c, int64_t ldc) {
  __m512 acc[MI][V];
  for (int i = 0; i < MI; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
  const int last = cols - 16 * (V - 1);  // the last vector's columns
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = widen(b + p * ldb + 16 * v, v == V - 1 ? last : 16);
    for (int i = 0; i < MI; ++i) {
      const __m512 av = _mm512_set1_ps(to_float(a[i * ars + p * acs]));
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MI; ++i)
    for (int v = 0; v < V; ++v) narrow(c + i * ldc + 16 * v, acc[i][v], v == V - 1 ? last : 16);
}

// f<MI>() for MI in 1..4 (the rows left of a block of 4)
template <template <int> class F, typename... Args>
void by_rows(int64_t mi, Args&&... args) {
  switch (mi) {
    case 1:
      return F<1>::run(args...);
    case 2:
      return F<2>::run(args...);
    case 3:
      return F<3>::run(args...);
    default:
      return F<4>::run(args...);
  }
}

template <int MI>
struct Dots {
  static void run(int64_t nj, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* w,
                  int64_t ldw, BFloat16* c, int64_t ldc) {
    switch (nj) {
      case 1:
        return dots<MI, 1>(k, a, lda, w, ldw, c, ldc);
      case 2:
        return dots<MI, 2>(k, a, lda, w, ldw, c, ldc);
      case 3:
        return dots<MI, 3>(k, a, lda, w, ldw, c, ldc);
      default:
        return dots<MI, 4>(k, a, lda, w, ldw, c, ldc);
    }
  }
};

template <int MI>
struct Rows {
  static void run(int64_t k, int cols, const BFloat16* a, int64_t ars, int64_t acs,
                  const BFloat16* b, int64_t ldb, BFloat16* c, int64_t ldc) {
    switch ((cols + 15) / 16) {
      case 1:
        return rows<MI, 1>(k, cols, a, ars, acs, b, ldb, c, ldc);
      case 2:
        return rows<MI, 2>(k, cols, a, ars, acs, b, ldb, c, ldc);
      case 3:
        return rows<MI, 3>(k, cols, a, ars, acs, b, ldb, c, ldc);
      default:
        return rows<MI, 4>(k, cols, a, ars, acs, b, ldb, c, ldc);
    }
  }
};

}  // namespace

bool small_gemm_bf16_avx512(int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t ars,
                            int64_t acs, const BFloat16* b, int64_t brs, int64_t bcs, BFloat16* c,
                            int64_t ldc) {
  if (m > kSmallGemmBf16Rows) return false;
  if (brs == 1 && acs == 1 && k > 1) {  // B = Wᵀ (or a vector), W's and A's rows runs: dots
    for (int64_t i = 0; i < m; i += 4)
      for (int64_t j = 0; j < n; j += 4)
        by_rows<Dots>(lower(4, m - i), lower(4, n - j), k, a + i * ars, ars, b + j * bcs, bcs,
                      c + i * ldc + j, ldc);
    return true;
  }
  // B's rows are runs, a vector's worth of them at least: 64 columns at a time (fewer, and a
  // long reduction, would be one chain of dependent multiply-adds: the widening is faster)
  if (bcs == 1 && n >= 16) {
    for (int64_t i = 0; i < m; i += 4)
      for (int64_t j = 0; j < n; j += 64)
        by_rows<Rows>(lower(4, m - i), k, static_cast<int>(lower(64, n - j)), a + i * ars, ars, acs,
                      b + j * bcs, brs, c + i * ldc + j, ldc);
    return true;
  }
  return false;
}

}  // namespace lazytrace::cpu

#else  // another CPU, or a compiler without AVX-512: the widening (matmul.cpp)

namespace lazytrace::cpu {
bool small_gemm_bf16_avx512(int64_t, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                            const BFloat16*, int64_t, int64_t, BFloat16*, int64_t) {
  return false;
}
}  // namespace lazytrace::cpu

#endif
