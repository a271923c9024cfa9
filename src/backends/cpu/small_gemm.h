#pragma once
// float32 products with few rows or a short reduction, by AVX2 + FMA kernels that read the
// weight where it lies instead of packing it (small_gemm_avx2.cpp), or their AVX-512 copies
// (small_gemm_avx512.cpp). At a transformer's
// small batch, x Wᵀ has 16 rows and a weight gradient Xᵀ dY a reduction of 16: BLAS then
// spends more time packing the weight, and zeroing C before accumulating into it, than
// multiplying.
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "lazytrace/core/half.h"

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
  // The caller writes the streams too (an update in place): their lines are asked for to
  // be written, so one that another core holds is taken from it while the product runs,
  // not when the update stores to it (where the cores share no cache, an update's blocks
  // share each weight's lines with the core that read it). Only where has_prefetchw().
  bool write = false;
  // More single streams, read after this one, [next, end): a loop's next iteration's slices
  // (RunContext::read_ahead).
  struct Range {
    const void* at;
    int64_t bytes;
  };
  const Range* next = nullptr;
  const Range* end = nullptr;
};

// The next line of each stream, asked for into L2: a kernel calls it once per reduction
// step. (static: each instruction set's file inlines its own copy, and none is exported.)
[[gnu::always_inline]] static inline void read_ahead(ReadAhead* ahead) {
  if (ahead == nullptr) return;
  if (ahead->done >= ahead->bytes) {
    if (ahead->next == ahead->end) return;
    *ahead->stream = ahead->next->at;
    ahead->bytes = ahead->next->bytes;
    ahead->done = 0;
    ++ahead->next;
  }
  for (const void* s : ahead->stream) {
    if (s == nullptr) continue;
    const char* line = static_cast<const char*>(s) + ahead->done;
#if defined(__x86_64__)
    if (ahead->write) {
      asm volatile("prefetchw %0" ::"m"(*line));
      continue;
    }
#endif
    __builtin_prefetch(line, 0, 2);
  }
  ahead->done += 64;
}

/**
 * Memory a loop's next iteration reads where this one reads [begin, end): the same bytes
 * `delta` further on (its x slices). Products whose weight lies in one read the next
 * iteration's weight ahead as they read this one's, each thread the lines it reads itself,
 * so they arrive in that thread's caches (RunContext::shadows; loop_overlap.cpp sets them).
 */
struct Shadow {
  const char* begin;
  const char* end;
  int64_t delta;
};

/** The shadows of the loop whose body runs a product; none by default. */
struct Shadows {
  const Shadow* begin = nullptr;
  const Shadow* end = nullptr;
};

/** One instruction set's small-product kernels; small_gemm_f32 picks among them by layout. */
struct SmallGemmKernels {
  // few rows, both operands contiguous along k: C[i, j] = A row i . B column j, B's column
  // j at B + j * ldb; with `shadow`, B's lines `shadow` bytes on are read ahead too
  void (*dot)(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
              int64_t ldb, float* C, int64_t ldc, int64_t shadow);
  // a short reduction, B contiguous along n; C written with plain or streaming stores
  void (*bcast)(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs,
                const float* B, int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead);
  void (*bcast_stream)(int64_t m, int64_t n, int64_t k, const float* A, int64_t ars, int64_t acs,
                       const float* B, int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead);
  // few rows, A contiguous along k, B along n, a long reduction
  void (*stream)(int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, ReadAhead* ahead);
  int64_t vector_floats;  // streaming stores need C's rows aligned to this many floats
};

/** This thread's scratch buffer `slot` (0 or 1), at least `floats` long, 64-byte aligned. */
float* small_gemm_scratch(int slot, int64_t floats);

/**
 * The AVX2 + FMA kernels (small_gemm_avx2.cpp) and their AVX-512 copies
 * (small_gemm_avx512.cpp); nullptr where this build has none. Use only where
 * has_avx2_fma() / has_avx512().
 */
const SmallGemmKernels* small_gemm_avx2();
const SmallGemmKernels* small_gemm_avx512();

/**
 * C[m, n] (row stride ldc) = A[m, k] B[k, n], with A's element (i, p) at A[i * ars + p * acs]
 * and B's (p, j) at B[p * brs + j * bcs], by one set of kernels. Runs and returns true for
 * the layouts and sizes where they beat BLAS: at most 32 rows with both operands contiguous
 * along k (x Wᵀ), or a reduction of at most 32 with B contiguous along n (Xᵀ dY, dYᵀ X), or
 * at most 32 rows with A contiguous along k and B along n (dY W). Returns false, touching
 * nothing, otherwise.
 */
bool small_gemm_f32(const SmallGemmKernels& kernels, int64_t m, int64_t n, int64_t k,
                    const float* A, int64_t ars, int64_t acs, const float* B, int64_t brs,
                    int64_t bcs, float* C, int64_t ldc, ReadAhead* ahead = nullptr,
                    Shadows shadows = {});

/** The most rows of C small_gemm_bf16_avx512 takes (from 4, oneDNN's bfloat16 products or
 * the widening to float32 are as fast: docs/benchmarks.md). */
inline constexpr int64_t kSmallGemmBf16Rows = 4;

/**
 * C[m, n] (row stride ldc) = A[m, k] B[k, n] for bfloat16 operands with at most
 * kSmallGemmBf16Rows rows (a token's x Wᵀ at generation, a product of vectors):
 * each value widened to float32 in registers as it is read, summed in float32, each result
 * rounded once; the weight read where it lies, half the bytes of a float32 one. Takes B = Wᵀ
 * (or a vector) with W's and A's rows runs of memory, or B's rows runs at least 16 columns
 * wide; returns false (nothing written) otherwise. AVX-512 with BW and VL only (has_avx512_bw_vl;
 * small_gemm_bf16_avx512.cpp).
 */
bool small_gemm_bf16_avx512(int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t ars,
                            int64_t acs, const BFloat16* b, int64_t brs, int64_t bcs, BFloat16* c,
                            int64_t ldc);

}  // namespace lazytrace::cpu
