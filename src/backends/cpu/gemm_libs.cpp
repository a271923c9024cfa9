// The product kernels GemmChoice picks among (gemm.h): the one place that calls OpenBLAS,
// oneDNN and libxsmm. oneDNN (LAZYTRACE_HAVE_ONEDNN) and libxsmm (LAZYTRACE_HAVE_XSMM) are
// optional at build time; OpenBLAS is not.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <unordered_map>
#include <vector>

#include "backends/cpu/gemm.h"
#include "core/hash.h"
#include "runtime/exit_gate.h"

#if LAZYTRACE_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif
#if LAZYTRACE_HAVE_XSMM
#include <libxsmm.h>
#endif

namespace lazytrace::cpu {
namespace {

// BLAS wants a leading dimension of at least 1 even where the operand has no elements.
int ld_of(int64_t ld) {
  return static_cast<int>(std::max<int64_t>(ld, 1));
}

const SmallGemmKernels* small_kernels() {
  if (has_avx512()) return small_gemm_avx512();
  if (has_avx2_fma()) return small_gemm_avx2();
  return nullptr;
}

bool run_small(const GemmArgs& g) {
  const SmallGemmKernels* kernels = small_kernels();
  return kernels != nullptr && small_gemm_f32(*kernels, g.m, g.n, g.k, g.a, g.oa.rs, g.oa.cs, g.b,
                                              g.ob.rs, g.ob.cs, g.c, g.ldc, g.ahead, g.shadows);
}

void run_openblas(const GemmArgs& g) {
  cblas_sgemm(CblasRowMajor, g.oa.trans ? CblasTrans : CblasNoTrans,
              g.ob.trans ? CblasTrans : CblasNoTrans, static_cast<int>(g.m), static_cast<int>(g.n),
              static_cast<int>(g.k), 1.0f, g.a, ld_of(g.oa.ld), g.b, ld_of(g.ob.ld), 0.0f, g.c,
              static_cast<int>(g.ldc));
}

#if LAZYTRACE_HAVE_ONEDNN
bool run_onednn(const GemmArgs& g) {
  // oneDNN runs on OpenMP: it is asked for a team of one, so no OpenMP worker ever spins
  // beside the pool (docs/gemm.md), and the calling thread's own setting is put back
  const int threads = omp_get_max_threads();
  if (threads != 1) omp_set_num_threads(1);
  const bool ok =
      dnnl_sgemm(g.oa.trans ? 'T' : 'N', g.ob.trans ? 'T' : 'N', g.m, g.n, g.k, 1.0f, g.a,
                 ld_of(g.oa.ld), g.b, ld_of(g.ob.ld), 0.0f, g.c, g.ldc) == dnnl_success;
  if (threads != 1) omp_set_num_threads(threads);
  return ok;
}

// oneDNN's bfloat16 matmul, one primitive per layout and size, made on first use by each
// thread that runs it (primitives are then never shared between threads) and run on a team
// of one, with a scratchpad the caller passes in.
class Bf16Matmuls {
  // oneDNN registers exit handlers at its first primitive and first run (its statics): the
  // exit gate goes after them once, so that it runs first at exit (runtime/exit_gate.h)
  static void gate_after_first_use() {
    static std::atomic<int> times{0};
    if (times.load(std::memory_order_relaxed) < 2 && times.fetch_add(1) < 2)
      runtime::close_runs_at_exit();
  }

 public:
  static bool native() {
    static const bool yes = [] {
      const unsigned isa = dnnl_get_effective_cpu_isa();
      return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    }();
    return yes;
  }

  bool run(int64_t m, int64_t n, int64_t k, const BFloat16* a, const GemmOperand& oa,
           const BFloat16* b, const GemmOperand& ob, BFloat16* c, int64_t ldc) {
    const Key key{m, n, k, oa.trans, oa.ld, ob.trans, ob.ld, ldc};
    auto it = made_.find(key);
    if (it == made_.end()) {
      if (made_.size() >= kMaxPrimitives) made_.clear();
      it = made_.emplace(key, make(m, n, k, oa, ob, ldc)).first;
      gate_after_first_use();
    }
    Made& p = it->second;
    if (!p.ok) return false;
    p.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<BFloat16*>(a));
    p.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<BFloat16*>(b));
    p.args.at(DNNL_ARG_DST).set_data_handle(c);
    if (p.scratch_bytes > 0) {
      scratch_.resize((p.scratch_bytes + sizeof(Line) - 1) / sizeof(Line));
      p.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch_.data());
    }
    const int threads = omp_get_max_threads();
    if (threads != 1) omp_set_num_threads(1);
    p.prim.execute(stream_, p.args);
    if (threads != 1) omp_set_num_threads(threads);
    gate_after_first_use();
    return true;
  }

 private:
  static constexpr size_t kMaxPrimitives = 512;
  using Key = std::array<int64_t, 8>;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = 0;
      for (int64_t v : k) h = hash_combine(h, static_cast<uint64_t>(v));
      return static_cast<size_t>(h);
    }
  };
  struct Made {
    bool ok = false;
    dnnl::matmul prim;
    // its operands (and scratchpad) by argument, memory set at each run
    std::unordered_map<int, dnnl::memory> args;
    size_t scratch_bytes = 0;
  };

  // A BLAS operand of rows x cols as oneDNN's strides.
  static dnnl::memory::desc desc_of(int64_t rows, int64_t cols, const GemmOperand& o) {
    const int64_t ld = std::max<int64_t>(o.ld, 1);
    return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::bf16,
                              o.trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
  }

  Made make(int64_t m, int64_t n, int64_t k, const GemmOperand& oa, const GemmOperand& ob,
            int64_t ldc) {
    Made p;
    try {
      const dnnl::memory::desc a = desc_of(m, k, oa), b = desc_of(k, n, ob);
      const dnnl::memory::desc c({m, n}, dnnl::memory::data_type::bf16, dnnl::memory::dims{ldc, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
      p.prim = dnnl::matmul(pd);
      p.args = {{DNNL_ARG_SRC, dnnl::memory(a, engine_, DNNL_MEMORY_NONE)},
                {DNNL_ARG_WEIGHTS, dnnl::memory(b, engine_, DNNL_MEMORY_NONE)},
                {DNNL_ARG_DST, dnnl::memory(c, engine_, DNNL_MEMORY_NONE)}};
      p.scratch_bytes = pd.scratchpad_desc().get_size();
      if (p.scratch_bytes > 0)
        p.args.emplace(DNNL_ARG_SCRATCHPAD,
                       dnnl::memory(pd.scratchpad_desc(), engine_, DNNL_MEMORY_NONE));
      p.ok = true;
    } catch (const dnnl::error&) {
      p.ok = false;  // a layout oneDNN does not take: the fixed rule runs it
    }
    return p;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::unordered_map<Key, Made, KeyHash> made_;
  struct alignas(64) Line {
    char bytes[64];
  };
  std::vector<Line> scratch_;  // oneDNN's scratchpad, on cache lines
};
#endif

// libxsmm is column-major: row-major C[m, n] is its C'[n, m] = B' A', with B as the n x k
// operand (transposed where B is stored transposed) and A as the k x m one. Its dispatch
// finds the kernel it generated for the shape before, or generates it.
bool run_xsmm(const GemmArgs& g) {
#if LAZYTRACE_HAVE_XSMM
  const libxsmm_blasint lda = ld_of(g.ob.ld), ldb = ld_of(g.oa.ld), ldc = g.ldc;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags =
      (g.ob.trans ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (g.oa.trans ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  const libxsmm_smmfunction kernel =
      libxsmm_smmdispatch(g.n, g.m, g.k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  if (kernel == nullptr) return false;
  kernel(g.b, g.a, g.c);
  return true;
#else
  (void)g;
  return false;
#endif
}

}  // namespace

const char* gemm_lib_name(GemmLib lib) {
  switch (lib) {
    case GemmLib::Lazytrace:
      return "lazytrace";
    case GemmLib::OpenBlas:
      return "openblas";
    case GemmLib::OneDnn:
      return "onednn";
    case GemmLib::Xsmm:
      return "libxsmm";
  }
  return "?";
}

bool gemm_lib_available(GemmLib lib) {
  switch (lib) {
    case GemmLib::Lazytrace:
      return small_kernels() != nullptr;
    case GemmLib::OpenBlas:
      return true;
    case GemmLib::OneDnn:
      return LAZYTRACE_HAVE_ONEDNN != 0;
    case GemmLib::Xsmm:
      return LAZYTRACE_HAVE_XSMM != 0;
  }
  return false;
}

bool run_gemm_with(GemmLib lib, const GemmArgs& g) {
  switch (lib) {
    case GemmLib::Lazytrace:
      return run_small(g);
    case GemmLib::OpenBlas:
      run_openblas(g);
      return true;
    case GemmLib::OneDnn:
#if LAZYTRACE_HAVE_ONEDNN
      return run_onednn(g);
#else
      return false;
#endif
    case GemmLib::Xsmm:
      return run_xsmm(g);
  }
  return false;
}

void run_gemm_fixed(const GemmArgs& g) {
  if (!run_small(g)) run_openblas(g);
}

bool run_gemm_bf16(int64_t m, int64_t n, int64_t k, const BFloat16* a, const GemmOperand& oa,
                   const BFloat16* b, const GemmOperand& ob, BFloat16* c, int64_t ldc) {
#if LAZYTRACE_HAVE_ONEDNN
  if (!Bf16Matmuls::native()) return false;
  thread_local Bf16Matmuls matmuls;
  return matmuls.run(m, n, k, a, oa, b, ob, c, ldc);
#else
  (void)m, (void)n, (void)k, (void)a, (void)oa, (void)b, (void)ob, (void)c, (void)ldc;
  return false;
#endif
}

void run_dgemm(int64_t m, int64_t n, int64_t k, const double* a, const GemmOperand& oa,
               const double* b, const GemmOperand& ob, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, oa.trans ? CblasTrans : CblasNoTrans,
              ob.trans ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0, a, ld_of(oa.ld), b, ld_of(ob.ld), 0.0, c,
              static_cast<int>(ldc));
}

void init_gemm_libs() {
  openblas_set_num_threads(1);
#if LAZYTRACE_HAVE_XSMM
  libxsmm_init();
#endif
}

}  // namespace lazytrace::cpu
