// Batched matmul, shared out over the thread pool in blocks: float32 blocks on the kernel
// gemm.h picks (float16 and bfloat16 by way of float32), float64 ones on OpenBLAS, integers
// in a plain loop. Batch dims broadcast by stride 0.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/elementwise.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

using Operand = GemmOperand;

// A size-1 dim's stride is arbitrary (a view of one row or column), but BLAS requires a
// leading dimension of at least the other dim's size: there it is taken as that size.
Operand blas_operand(const View& v) {
  const int nd = v.shape.size();
  const int64_t rows = v.shape[nd - 2], cols = v.shape[nd - 1];
  Operand o{false, 0, v.strides[nd - 2], v.strides[nd - 1]};
  if ((o.cs == 1 || cols == 1) && (rows == 1 || o.rs >= cols)) {
    o.ld = rows == 1 ? std::max<int64_t>(cols, 1) : o.rs;
  } else {
    o.trans = true;
    o.ld = cols == 1 ? std::max<int64_t>(rows, 1) : o.cs;
  }
  return o;
}

// Element offsets of each batch's matrix in a and b.
void batch_offsets(const MatmulStep& s, int64_t bi, int64_t& oa, int64_t& ob) {
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

// The kernel a float32 or bfloat16 product runs with (gemm.h): by the fixed rule, or by the
// library GemmChoice times or kept. A block the library declines runs by the fixed rule and is
// reported in `declined`.
struct Kernel {
  GemmLib lib = GemmLib::Lazytrace;
  // GemmPlan::other_split: blocks cut the other way (Blocks), or a product the rule runs
  // whole cut into blocks (cut_small)
  bool other_split = false;
  std::atomic<bool>* declined = nullptr;
};

// What a loop asks a product of its body to read ahead (RunContext::read_ahead, shadows),
// and its kernel.
struct Hints {
  ReadAhead* ahead = nullptr;
  Shadows shadows;
  Kernel kernel;
};

// The hints for a part of a product: the read-ahead stream only on the thread that runs the
// step (`owner`), whose own it is.
Hints hints_for(const RunContext& ctx, std::thread::id owner, Kernel kernel) {
  return {std::this_thread::get_id() == owner ? ctx.read_ahead : nullptr, ctx.shadows, kernel};
}

template <typename T>
void gemm(const Operand& a, const Operand& b, int64_t m, int64_t n, int64_t k, const T* pa,
          const T* pb, T* pc, int64_t ldc, Hints hints = {}) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) pc[i * ldc + j] = T(0);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const GemmArgs g{m, n, k, pa, a, pb, b, pc, ldc, hints.ahead, hints.shadows};
    const Kernel& kernel = hints.kernel;
    const bool fixed = kernel.lib == GemmLib::Lazytrace;
    if (!fixed && run_gemm_with(kernel.lib, g)) return;
    run_gemm_fixed(g);
    if (!fixed && kernel.declined != nullptr)
      kernel.declined->store(true, std::memory_order_relaxed);
  } else {
    run_dgemm(m, n, k, pa, a, pb, b, pc, ldc);
  }
}

// A 16-bit operand of rows x cols as float32 in `buf`, packed in its own layout: row after
// row, or (transposed) column after column; returns it as a BLAS operand of `buf`.
template <typename S>
Operand widen(const Operand& o, int64_t rows, int64_t cols, const S* p, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  // `runs` runs of `len` values, run r at p + r * outer, values `inner` apart
  const int64_t runs = o.trans ? cols : rows, len = o.trans ? rows : cols;
  const int64_t outer = o.trans ? o.cs : o.rs, inner = o.trans ? o.rs : o.cs;
  for (int64_t r = 0; r < runs; ++r) {
    const S* src = p + r * outer;
    float* dst = buf.data() + r * len;
    if (inner == 1)
      for (int64_t j = 0; j < len; ++j) dst[j] = static_cast<float>(src[j]);
    else
      for (int64_t j = 0; j < len; ++j) dst[j] = static_cast<float>(src[j * inner]);
  }
  return o.trans ? Operand{true, rows, 1, rows} : Operand{false, cols, cols, 1};
}

// One block: C[rm, rn] (row stride ldc) = A[rm, k] B[k, rn].
template <typename S>
void multiply_block(const Operand& oa, const Operand& ob, int64_t m, int64_t n, int64_t k,
                    const S* A, const S* B, S* c, int64_t ldc, Hints hints) {
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    gemm<S>(oa, ob, m, n, k, A, B, c, ldc, hints);
  } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    if constexpr (std::is_same_v<S, BFloat16>) {
      if (hints.kernel.lib == GemmLib::OneDnn) {
        if (run_gemm_bf16(m, n, k, A, oa, B, ob, c, ldc)) return;
        if (hints.kernel.declined != nullptr)
          hints.kernel.declined->store(true, std::memory_order_relaxed);
      }
      // the fixed rule: a few rows by the small kernel, widening as it reads ...
      if (has_avx512_bw_vl() &&
          small_gemm_bf16_avx512(m, n, k, A, oa.rs, oa.cs, B, ob.rs, ob.cs, c, ldc))
        return;
    }
    // ... else widened to float32, each operand in its own layout (its runs of memory in
    // order), multiplied by float32's
    thread_local std::vector<float> fa, fb, fc;
    const Operand wa = widen(oa, m, k, A, fa), wb = widen(ob, k, n, B, fb);
    fc.resize(static_cast<size_t>(m * n));
    gemm<float>(wa, wb, m, n, k, fa.data(), fb.data(), fc.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      const float* r = fc.data() + i * n;
      S* out = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) out[j] = S(r[j]);  // vectorized (from_float has no branch)
    }
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

// One product's work items: each batch, in `split` blocks of rows (or columns).
template <typename S>
class Blocks {
 public:
  Blocks(const MatmulStep& s, const RunContext& ctx, int64_t split, Kernel kernel)
      : s_(s), ctx_(ctx), owner_(std::this_thread::get_id()), split_(split), kernel_(kernel) {
    const int nd = s.out_shape.size();
    m_ = s.out_shape[nd - 2];
    n_ = s.out_shape[nd - 1];
    k_ = s.a.shape[s.a.shape.size() - 1];
    for (int d = 0; d < nd - 2; ++d) nbatch_ *= s.out_shape[d];
    A_ = reinterpret_cast<const S*>(ctx.base[s.a.storage]);
    B_ = reinterpret_cast<const S*>(ctx.base[s.b.storage]);
    C_ = reinterpret_cast<S*>(ctx.base[s.out_storage]);
    oa_ = blas_operand(s.a);
    ob_ = blas_operand(s.b);
    // row blocks keep B whole; the rule prefers them (the choice may cut the other way)
    by_rows_ = (m_ >= 64 * split || m_ >= n_) != kernel.other_split;
    extent_ = by_rows_ ? m_ : n_;
    block_ = (extent_ + split - 1) / std::max<int64_t>(split, 1);
  }

  int64_t items() const { return nbatch_ * split_; }

  void run(int64_t w) const {
    const int64_t bi = w / split_, part = w % split_;
    const int64_t lo = std::min(extent_, part * block_), hi = std::min(extent_, lo + block_);
    if (lo >= hi) return;
    int64_t offa, offb;
    batch_offsets(s_, bi, offa, offb);
    const int64_t rm = by_rows_ ? hi - lo : m_, rn = by_rows_ ? n_ : hi - lo;
    if (by_rows_)
      offa += lo * oa_.rs;
    else
      offb += lo * ob_.cs;
    S* c = C_ + bi * m_ * n_ + (by_rows_ ? lo * n_ : lo);
    multiply_block<S>(oa_, ob_, rm, rn, k_, A_ + offa, B_ + offb, c, n_,
                      hints_for(ctx_, owner_, kernel_));
  }

 private:
  const MatmulStep& s_;
  const RunContext& ctx_;
  std::thread::id owner_;
  int64_t split_, m_ = 0, n_ = 0, k_ = 0, nbatch_ = 1, extent_ = 0, block_ = 0;
  Kernel kernel_;
  const S *A_, *B_;
  S* C_;
  Operand oa_, ob_;
  bool by_rows_ = true;
};

// Multiply-adds of a product, over all its batches.
int64_t work_of(const MatmulStep& s) {
  return s.out_shape.numel() * s.a.shape[s.a.shape.size() - 1];
}

int64_t batches_of(const MatmulStep& s) {
  int64_t nbatch = 1;
  for (int d = 0; d < s.out_shape.size() - 2; ++d) nbatch *= s.out_shape[d];
  return nbatch;
}

// BLAS runs single-threaded (cpu_device sets it); the cores are shared out here, over
// batches, or over row (or column) blocks of one large product, on the one thread pool.
// One product is split over the threads from 2^19 multiply-adds: below, handing A to
// another core and waiting for its half costs more than the half.
constexpr int64_t kSplitWork = int64_t{1} << 19;
// Products of fewer multiply-adds than this go to a thread together (batched attention).
constexpr int64_t kGrainWork = int64_t{1} << 17;

// A float32 product with few rows and a long reduction (x Wᵀ of a layer's down projection:
// 16 x 1024 by 1024 x 128) in parts of the reduction, one per thread, summed after: each
// thread packs and reads half of A and of each row of B, where column halves each read
// all of A. Run inline (the other threads busy), its parts run one after the other.
// (sharing_of says which products.)
void split_reduction(const MatmulStep& s, const RunContext& ctx, Kernel kernel) {
  const int nd = s.out_shape.size();
  const int64_t m = s.out_shape[nd - 2], n = s.out_shape[nd - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1];
  const int threads = runtime::num_threads();
  const Operand oa = blas_operand(s.a), ob = blas_operand(s.b);
  const float* A = reinterpret_cast<const float*>(ctx.base[s.a.storage]) + s.a.offset;
  const float* B = reinterpret_cast<const float*>(ctx.base[s.b.storage]) + s.b.offset;
  float* C = reinterpret_cast<float*>(ctx.base[s.out_storage]);
  thread_local std::vector<float> partials;  // C of parts 1.. (the caller's buffer)
  partials.resize(static_cast<size_t>(m * n * (threads - 1)));
  float* extra = partials.data();
  const int64_t per = (k / threads + 15) / 16 * 16;
  auto k_at = [&](int64_t part) { return part >= threads ? k : std::min(k, part * per); };
  // every part on its own and summed in one order, however the parts ran: the same bits
  // whether the other threads took parts or were busy
  const std::thread::id owner = std::this_thread::get_id();
  runtime::parallel_for(threads, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      gemm<float>(oa, ob, m, n, k_at(p + 1) - k_at(p), A + k_at(p) * oa.cs, B + k_at(p) * ob.rs,
                  p == 0 ? C : extra + (p - 1) * m * n, n, hints_for(ctx, owner, kernel));
  });
  for (int p = 1; p < threads; ++p)
    for (int64_t i = 0; i < m * n; ++i) C[i] += extra[(p - 1) * m * n + i];
}

// Whether a product the rule runs whole on one thread may be cut into blocks over the threads
// instead (the gemm_cut_small pass): one matrix of enough work for GemmChoice to time.
bool cut_small(const MatmulStep& s, const RunContext& ctx) {
  const int64_t work = work_of(s);
  return ctx.passes.on(runtime::Pass::GemmCutSmall) && runtime::num_threads() > 1 &&
         batches_of(s) == 1 && work >= GemmChoice::kMinWork && work < kSplitWork;
}

// The kernel a product's blocks run with: `kernel`, its other_split meaning the rule's cut
// where it asks for a small product cut.
Kernel blocks_kernel(const MatmulStep& s, const RunContext& ctx, Kernel kernel) {
  if (kernel.other_split && cut_small(s, ctx)) kernel.other_split = false;
  return kernel;
}

// How run_product shares a product over the threads: along its reduction (split_reduction,
// float32 only: few rows, a long reduction), or each batch in `parts` blocks of rows or
// columns (1: whole; Blocks).
struct Sharing {
  bool along_reduction;
  int64_t parts;
};

Sharing sharing_of(const MatmulStep& s) {
  const int threads = runtime::num_threads();
  const int64_t nbatch = batches_of(s);
  const bool big = work_of(s) / nbatch >= kSplitWork;
  const int nd = s.out_shape.size();
  const int64_t m = s.out_shape[nd - 2], n = s.out_shape[nd - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1];
  const bool along = big && nbatch == 1 && threads > 1 && m <= 32 && k >= 4 * n;
  return {along, (big && nbatch < threads) ? (threads + nbatch - 1) / nbatch : 1};
}

template <typename S>
void run_product(const MatmulStep& s, const RunContext& ctx, Kernel kernel) {
  Sharing sharing = sharing_of(s);
  if constexpr (std::is_same_v<S, float>)
    if (sharing.along_reduction) return split_reduction(s, ctx, kernel);
  const int64_t work = work_of(s), nbatch = batches_of(s);
  const bool cut = kernel.other_split && cut_small(s, ctx);  // GemmChoice kept the cut
  if (cut) {
    sharing.parts = runtime::num_threads();
    kernel.other_split = false;  // on the rule's cut (blocks_kernel)
  }
  const bool big = work / nbatch >= kSplitWork;
  const Blocks<S> blocks(s, ctx, sharing.parts, kernel);
  const int64_t grain =
      big || cut ? 1 : std::max<int64_t>(1, kGrainWork * nbatch / std::max<int64_t>(work, 1));
  runtime::parallel_for(blocks.items(), grain, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) blocks.run(w);
  });
}

// Whether GemmChoice picks the product's kernel: float32 or bfloat16 (the fixed rule's
// widening against the CPU's bfloat16 instructions), each matrix large enough, and not
// a product of lazytrace's small kernels' sizes (few rows, or a short reduction) that a
// loop asks to read ahead: only those kernels take the hints, and the time they save falls
// on the steps after the product, which its own timing would not see.
bool chooses(const MatmulStep& s, const RunContext& ctx) {
  if (ctx.choices.gemm == nullptr || (s.dtype != DType::float32 && s.dtype != DType::bfloat16) ||
      work_of(s) / batches_of(s) < GemmChoice::kMinWork)
    return false;
  const bool hinted = ctx.read_ahead != nullptr || ctx.shadows.begin != ctx.shadows.end;
  const int64_t m = s.out_shape[s.out_shape.size() - 2], k = s.a.shape[s.a.shape.size() - 1];
  return !(hinted && (m <= 32 || k <= 32));
}

// What makes two products the same to GemmChoice: dtype, sizes, the strides of the
// matrices, the batch count, the threads they are shared out over, and whether their cut is
// chosen too (the gemm_split and gemm_cut_small passes; on and off keep plans of their own).
GemmChoice::Key key_of(const MatmulStep& s, const RunContext& ctx) {
  const int na = s.a.shape.size(), nb = s.b.shape.size(), no = s.out_shape.size();
  return {{s.out_shape[no - 2], s.out_shape[no - 1], s.a.shape[na - 1], s.a.strides[na - 2],
           s.a.strides[na - 1], s.b.strides[nb - 2], s.b.strides[nb - 1], batches_of(s),
           runtime::num_threads(),
           ctx.passes.on(runtime::Pass::GemmSplit) + 2 * ctx.passes.on(runtime::Pass::GemmCutSmall),
           static_cast<int64_t>(s.dtype)}};
}

std::string describe_product(const MatmulStep& s) {
  const Operand oa = blas_operand(s.a), ob = blas_operand(s.b);
  const int no = s.out_shape.size();
  const int64_t m = s.out_shape[no - 2], n = s.out_shape[no - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1], nbatch = batches_of(s);
  return (nbatch > 1 ? std::to_string(nbatch) + " x " : std::string()) + std::to_string(m) + " x " +
         std::to_string(k) + " @ " + std::to_string(k) + " x " + std::to_string(n) + " (" +
         (oa.trans ? "T" : "N") + (ob.trans ? "T" : "N") + ", " +
         std::to_string(runtime::num_threads()) + " threads" +
         (s.dtype == DType::float32 ? "" : std::string(", ") + dtype_short(s.dtype)) + ")";
}

// The kernel a product runs with: the fixed rule, or the one GemmChoice kept for it (which
// it measures first, running the product with each).
std::optional<Kernel> chosen_kernel(const MatmulStep& s, const RunContext& ctx) {
  if (!chooses(s, ctx)) return Kernel{};
  if (std::optional<GemmPlan> plan = ctx.choices.gemm->find(key_of(s, ctx)))
    return Kernel{plan->lib, plan->other_split};
  return std::nullopt;
}

template <typename S>
void measure_product(const MatmulStep& s, const RunContext& ctx) {
  const GemmChoice::Key key = key_of(s, ctx);
  const Sharing sharing = sharing_of(s);  // a product cut into blocks: the cut is a choice too
  ctx.choices.gemm->measure(
      key,
      [&](GemmPlan plan) {
        // bfloat16: the fixed rule or the CPU's bfloat16 instructions (oneDNN); no other
        if (std::is_same_v<S, BFloat16> && plan.lib != GemmLib::Lazytrace &&
            plan.lib != GemmLib::OneDnn)
          return false;
        std::atomic<bool> declined{false};
        run_product<S>(s, ctx, {plan.lib, plan.other_split, &declined});
        return !declined.load();
      },
      ((key.v[9] & 1) != 0 && !sharing.along_reduction && sharing.parts > 1) || cut_small(s, ctx),
      describe_product(s), 2.0 * static_cast<double>(work_of(s)),
      ctx.passes.on(runtime::Pass::GemmChoiceCache));
}

template <typename S>
void matmul_typed(const MatmulStep& s, const RunContext& ctx) {
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, BFloat16>) {
    if (std::optional<Kernel> kernel = chosen_kernel(s, ctx))
      run_product<S>(s, ctx, *kernel);
    else
      measure_product<S>(s, ctx);
  } else {
    run_product<S>(s, ctx, {});
  }
}

}  // namespace

void matmul_rows_f32(const MatmulStep& s, int64_t bi, int64_t r0, int64_t rows, float* out,
                     const RunContext& ctx, ReadAhead* ahead) {
  const int64_t n = s.out_shape[s.out_shape.size() - 1];
  const int64_t k = s.a.shape[s.a.shape.size() - 1];
  const Operand oa = blas_operand(s.a), ob = blas_operand(s.b);
  int64_t offa, offb;
  batch_offsets(s, bi, offa, offb);
  const float* A = reinterpret_cast<const float*>(ctx.base[s.a.storage]) + offa + r0 * oa.rs;
  const float* B = reinterpret_cast<const float*>(ctx.base[s.b.storage]) + offb;
  gemm<float>(oa, ob, rows, n, k, A, B, out, n, Hints{ahead, ctx.shadows, {}});
}

// Two float32 products side by side, each split into half as many blocks as there are
// threads (on two cores: one product each, where alone each would be split in two and
// wait for the other core twice).
void run_matmuls(const MatmulStep& a, const MatmulStep& b, const RunContext& ctx) {
  const int threads = runtime::num_threads();
  if (threads < 2 || a.dtype != DType::float32 || b.dtype != DType::float32 || batches_of(a) != 1 ||
      batches_of(b) != 1 || work_of(a) < kGrainWork || work_of(b) < kGrainWork) {
    run_matmul(a, ctx);
    run_matmul(b, ctx);
    return;
  }
  // each product's kernel; one that GemmChoice has yet to measure runs alone, measured
  const std::optional<Kernel> ka = chosen_kernel(a, ctx), kb = chosen_kernel(b, ctx);
  if (!ka || !kb) {
    run_matmul(a, ctx);
    run_matmul(b, ctx);
    return;
  }
  const int64_t split = std::max(1, threads / 2);
  const Blocks<float> x(a, ctx, split, blocks_kernel(a, ctx, *ka)),
      y(b, ctx, split, blocks_kernel(b, ctx, *kb));
  runtime::parallel_for(x.items() + y.items(), 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) w < x.items() ? x.run(w) : y.run(w - x.items());
  });
}

void run_matmul(const MatmulStep& s, const RunContext& ctx) {
  dispatch(s.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<S, bool>) matmul_typed<S>(s, ctx);
  });
}

}  // namespace lazytrace::cpu
