// Batched matmul through BLAS (float32, float64; float16 and bfloat16 by way of float32),
// with a plain loop for integers. Batch dims broadcast by stride 0.
#include <cblas.h>

#include <cstdlib>
#include <type_traits>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/small_gemm.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

struct Operand {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
  int64_t rs, cs;  // row and column strides
};

Operand blas_operand(const compiler::View& v) {
  const int nd = v.shape.size();
  Operand o{CblasNoTrans, 0, v.strides[nd - 2], v.strides[nd - 1]};
  if (o.cs == 1) {
    o.ld = o.rs;
  } else {
    o.trans = CblasTrans;
    o.ld = o.cs;
  }
  return o;
}

// Element offsets of each batch's matrix in a and b.
void batch_offsets(const compiler::MatmulStep& s, int64_t bi, int64_t& oa, int64_t& ob) {
  const int nb = s.out_shape.size() - 2;
  oa = s.a.offset;
  ob = s.b.offset;
  const int na = s.a.shape.size() - 2, nbb = s.b.shape.size() - 2;
  for (int d = nb - 1; d >= 0; --d) {
    int64_t i = bi % s.out_shape[d];
    bi /= s.out_shape[d];
    int da = na - nb + d, db = nbb - nb + d;
    if (da >= 0 && s.a.shape[da] != 1) oa += i * s.a.strides[da];
    if (db >= 0 && s.b.shape[db] != 1) ob += i * s.b.strides[db];
  }
}

template <typename T>
void gemm(const Operand& a, const Operand& b, int64_t m, int64_t n, int64_t k, const T* pa,
          const T* pb, T* pc, int64_t ldc, ReadAhead* ahead = nullptr) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) pc[i * ldc + j] = T(0);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx512() &&
        small_gemm_f32_avx512(m, n, k, pa, a.rs, a.cs, pb, b.rs, b.cs, pc, ldc, ahead))
      return;
    if (has_avx2_fma() && small_gemm_f32(m, n, k, pa, a.rs, a.cs, pb, b.rs, b.cs, pc, ldc, ahead))
      return;
  }
  auto lda = static_cast<int>(std::max<int64_t>(a.ld, 1));
  auto ldb = static_cast<int>(std::max<int64_t>(b.ld, 1));
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, a.trans, b.trans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, pa, lda, pb, ldb, 0.0f, pc, static_cast<int>(ldc));
  else
    cblas_dgemm(CblasRowMajor, a.trans, b.trans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0, pa, lda, pb, ldb, 0.0, pc, static_cast<int>(ldc));
}

// One block: C[rm, rn] (row stride ldc) = A[rm, k] B[k, rn].
template <typename S>
void multiply_block(const Operand& oa, const Operand& ob, int64_t m, int64_t n, int64_t k,
                    const S* A, const S* B, S* c, int64_t ldc) {
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    gemm<S>(oa, ob, m, n, k, A, B, c, ldc);
  } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    thread_local std::vector<float> fa, fb, fc;
    fa.resize(static_cast<size_t>(m * k));
    fb.resize(static_cast<size_t>(k * n));
    fc.resize(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) fa[i * k + j] = static_cast<float>(A[i * oa.rs + j * oa.cs]);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) fb[i * n + j] = static_cast<float>(B[i * ob.rs + j * ob.cs]);
    Operand ra{CblasNoTrans, k, k, 1}, rb{CblasNoTrans, n, n, 1};
    gemm<float>(ra, rb, m, n, k, fa.data(), fb.data(), fc.data(), n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = S(fc[i * n + j]);
  } else {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += static_cast<int64_t>(A[i * oa.rs + q * oa.cs]) *
                 static_cast<int64_t>(B[q * ob.rs + j * ob.cs]);
        c[i * ldc + j] = static_cast<S>(acc);
      }
  }
}

template <typename S>
void matmul_typed(const compiler::MatmulStep& s, const RunContext& ctx) {
  const int nd = s.out_shape.size();
  const int64_t m = s.out_shape[nd - 2], n = s.out_shape[nd - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1];
  int64_t nbatch = 1;
  for (int d = 0; d < nd - 2; ++d) nbatch *= s.out_shape[d];
  const S* A = reinterpret_cast<const S*>(ctx.base[s.a.storage]);
  const S* B = reinterpret_cast<const S*>(ctx.base[s.b.storage]);
  S* C = reinterpret_cast<S*>(ctx.base[s.out_storage]);
  const Operand oa = blas_operand(s.a), ob = blas_operand(s.b);
  // BLAS runs single-threaded (cpu_device sets it); the cores are shared out here, over
  // batches, or over row (or column) blocks of one large product, on the one thread pool.
  const int threads = runtime::num_threads();
  // One product is split over the threads from 2^19 multiply-adds: below, handing A to
  // another core and waiting for its half cost more than the half (x Wᵀ at 16 tokens and
  // hidden 128: 6.6 µs split, 4.6 µs on one thread).
  const bool big = m * n * k >= (int64_t{1} << 19);
  const int64_t split = (big && nbatch < threads) ? (threads + nbatch - 1) / nbatch : 1;
  const bool by_rows = m >= 64 * split || m >= n;  // row blocks keep B whole; prefer them
  const int64_t extent = by_rows ? m : n;
  const int64_t block = (extent + split - 1) / std::max<int64_t>(split, 1);
  const int64_t grain =
      big ? 1 : std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(m * n * k, 1));
  runtime::parallel_for(nbatch * split, grain, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t bi = w / split, part = w % split;
      const int64_t lo = std::min(extent, part * block), hi = std::min(extent, lo + block);
      if (lo >= hi) continue;
      int64_t offa, offb;
      batch_offsets(s, bi, offa, offb);
      const int64_t rm = by_rows ? hi - lo : m, rn = by_rows ? n : hi - lo;
      if (by_rows)
        offa += lo * oa.rs;
      else
        offb += lo * ob.cs;
      S* c = C + bi * m * n + (by_rows ? lo * n : lo);
      multiply_block<S>(oa, ob, rm, rn, k, A + offa, B + offb, c, n);
    }
  });
}

}  // namespace

void matmul_rows_f32(const compiler::MatmulStep& s, int64_t bi, int64_t r0, int64_t rows,
                     float* out, const RunContext& ctx, ReadAhead* ahead) {
  const int64_t n = s.out_shape[s.out_shape.size() - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1];
  const Operand oa = blas_operand(s.a), ob = blas_operand(s.b);
  int64_t offa, offb;
  batch_offsets(s, bi, offa, offb);
  const float* A = reinterpret_cast<const float*>(ctx.base[s.a.storage]) + offa + r0 * oa.rs;
  const float* B = reinterpret_cast<const float*>(ctx.base[s.b.storage]) + offb;
  gemm<float>(oa, ob, rows, n, k, A, B, out, n, ahead);
}

void run_matmul(const compiler::MatmulStep& s, const RunContext& ctx) {
  dispatch(s.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<S, bool>) matmul_typed<S>(s, ctx);
  });
}

}  // namespace lazytrace::cpu
