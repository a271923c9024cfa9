// Products at a decoder's shapes (gemm_shapes.h: the forward x Wᵀ, dY W and dYᵀ X of both
// MLP projections, 16 to 512 tokens), in GFLOP/s: lazytrace's matmul, with its per-shape
// kernel choice (the gemm_choice pass, backends/cpu/gemm.h) and without it, against the
// libraries it can choose from, each called directly: OpenBLAS, oneDNN's sgemm and
// libxsmm's JIT kernel (libxsmm_sgemm where it has no kernel for the layout).
// bench/gemm_table.py turns the JSON into docs/gemm.md's table.
//
// Threads: lazytrace runs on its own pool (LAZYTRACE_NUM_THREADS, else every core); OpenBLAS
// (openblas_set_num_threads) and oneDNN (omp_set_num_threads) get that count too; libxsmm's
// kernels run on one thread, as lazytrace calls them per block.
// The five rows of a shape run one after the other, shape after shape, so that the VM's
// drift falls on all five. OpenBLAS's pthreads and oneDNN's OpenMP workers spin for a while
// after a call and steal cores from whatever runs next: each of their rows ends with a
// pause, outside the timing, for them to go to sleep.
// BM_Paired goes further: lazytrace and the three libraries in one benchmark, in rounds of
// short bursts side by side (their order turning each round), each library's time against
// lazytrace's in the same round, the median over rounds (`vs_<library>`; `vs_best`: against
// the fastest library). Run it with --benchmark_filter=Paired --benchmark_min_time=5 or so:
// about 10 rounds a shape, 4 to 5 minutes in all.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <libxsmm.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <lazytrace/lazytrace.h>

#include "gemm_shapes.h"
#include "runtime/thread_pool.h"

namespace {

using bench::AlignedFloats;
using bench::Product;
using bench::product_of;
using bench::random_floats;

int bench_threads() {
  return lt::runtime::num_threads();
}

void set_counters(benchmark::State& state, const Product& p, int threads) {
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * static_cast<double>(p.m * p.n * p.k),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

// Leading dimensions of the stored operands: A [m, k] or [k, m], B [k, n] or [n, k].
int lda_of(const Product& p) {
  return static_cast<int>(p.ta ? p.m : p.k);
}
int ldb_of(const Product& p) {
  return static_cast<int>(p.tb ? p.k : p.n);
}

// After a library's own threads ran: wait for its workers to sleep (OpenBLAS's after 2^28
// cycles, libgomp's after its spin count), keeping every core busy meanwhile: a virtual
// machine whose cores idled for a quarter of a second runs the next tens of milliseconds at
// up to half speed (a 1024 x 16 @ 16 x 128 product on two threads: 100 GFLOP/s over 10 ms
// after such a sleep, 160-230 after this pause, 210-230 without a pause).
void let_workers_sleep() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  auto spin = [until] {
    while (std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  };
  std::vector<std::thread> others;
  for (int i = 1; i < bench_threads(); ++i) others.emplace_back(spin);
  spin();
  for (std::thread& t : others) t.join();
}

// 64 entries of C against float64 dot products.
bool spot_check(const Product& p, const float* a, const float* b, const float* c) {
  std::mt19937 gen(5);
  for (int s = 0; s < 64; ++s) {
    const int64_t i = static_cast<int64_t>(gen() % static_cast<uint32_t>(p.m));
    const int64_t j = static_cast<int64_t>(gen() % static_cast<uint32_t>(p.n));
    double ref = 0;
    for (int64_t q = 0; q < p.k; ++q) {
      const double x = a[p.ta ? q * p.m + i : i * p.k + q];
      const double y = b[p.tb ? j * p.k + q : q * p.n + j];
      ref += x * y;
    }
    if (!(std::abs(ref - static_cast<double>(c[i * p.n + j])) <= 1e-3 * (1.0 + std::abs(ref))))
      return false;  // a NaN too
  }
  return true;
}

// lazytrace: inputs materialized before timing; each iteration records one matmul (through
// the transposed views the layout needs) and syncs it, a compile-cache hit after the
// warm-up, and releases the result inside the timing, as in real use.
void lazytrace_row(benchmark::State& state, bool choice) {
  const Product p = product_of(state);
  lt::debug::set_disabled_passes(choice ? std::vector<std::string>{}
                                        : std::vector<std::string>{"gemm_choice"});
  lt::manual_seed(0);
  lt::Tensor a = p.ta ? lt::randn({p.k, p.m}) : lt::randn({p.m, p.k});
  lt::Tensor b = p.tb ? lt::randn({p.n, p.k}) : lt::randn({p.k, p.n});
  lt::sync({a, b});
  auto product = [&] {
    return lt::matmul(p.ta ? lt::transpose(a) : a, p.tb ? lt::transpose(b) : b);
  };
  {
    lt::Tensor c = product();
    lt::sync({c});
    if (!spot_check(p, a.to_vector<float>().data(), b.to_vector<float>().data(),
                    c.to_vector<float>().data())) {
      state.SkipWithError("lazytrace's matmul differs from a float64 dot product");
      return;
    }
  }
  const int64_t miss0 = lt::metrics::counter("CacheMiss");
  for (auto _ : state) {
    lt::Tensor c = product();
    lt::sync({c});
    benchmark::DoNotOptimize(c.impl().get());
  }
  if (lt::metrics::counter("CacheMiss") != miss0)
    state.SkipWithError("the matmul graph recompiled in the loop");
  lt::debug::set_disabled_passes({});
  set_counters(state, p, bench_threads());
}

void BM_Lazytrace(benchmark::State& state) {
  lazytrace_row(state, true);
}

void BM_LazytraceFixedRule(benchmark::State& state) {
  lazytrace_row(state, false);
}

// A library called directly on aligned buffers, after untimed warm-up calls (oneDNN and
// libxsmm generate their kernels on first use) and a spot check.
template <typename F>
void library_row(benchmark::State& state, const Product& p, F&& multiply, int threads) {
  AlignedFloats a = random_floats(p.m * p.k, 1), b = random_floats(p.k * p.n, 2);
  AlignedFloats c = random_floats(p.m * p.n, 3);  // touched: no first-use page faults
  for (int i = 0; i < 3; ++i) multiply(a.get(), b.get(), c.get());
  if (!spot_check(p, a.get(), b.get(), c.get())) {
    state.SkipWithError("the product differs from a float64 dot product");
    return;
  }
  for (auto _ : state) {
    multiply(a.get(), b.get(), c.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, threads);
}

using Multiply = std::function<void(const float*, const float*, float*)>;

// Each library's call of the product. OpenBLAS and oneDNN run on bench_threads() of their
// own threads (set before their calls: openblas_threads, omp_set_num_threads), libxsmm's
// kernel on the calling thread.
Multiply openblas_of(const Product& p) {
  return [p](const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1.0f, a,
                lda_of(p), b, ldb_of(p), 0.0f, c, static_cast<int>(p.n));
  };
}

// libxsmm is column-major: row-major C = A B is its Cᵀ = Bᵀ Aᵀ. `jit`: whether it has a
// kernel for the layout (else libxsmm_sgemm).
Multiply libxsmm_of(const Product& p, bool* jit = nullptr) {
  const libxsmm_blasint m = p.n, n = p.m, k = p.k, lda = ldb_of(p), ldb = lda_of(p), ldc = p.n;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = (p.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (p.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  const libxsmm_smmfunction kernel =
      libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  if (jit) *jit = kernel != nullptr;
  const char ta = p.tb ? 'T' : 'N', tb = p.ta ? 'T' : 'N';
  return [=](const float* a, const float* b, float* c) {
    if (kernel != nullptr)
      kernel(b, a, c);
    else
      libxsmm_sgemm(&ta, &tb, &m, &n, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc);
  };
}

// `ok` turns false where a call fails.
Multiply onednn_of(const Product& p, bool* ok) {
  return [p, ok](const float* a, const float* b, float* c) {
    *ok &= dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, 1.0f, a, lda_of(p), b,
                      ldb_of(p), 0.0f, c, p.n) == dnnl_success;
  };
}

void BM_OpenBLAS(benchmark::State& state) {
  const Product p = product_of(state);
  openblas_set_num_threads(bench_threads());
  library_row(state, p, openblas_of(p), openblas_get_num_threads());
  openblas_set_num_threads(1);  // lazytrace's setting: its rows call OpenBLAS one thread a block
  let_workers_sleep();
}

void BM_libxsmm(benchmark::State& state) {
  const Product p = product_of(state);
  bool jit = false;
  library_row(state, p, libxsmm_of(p, &jit), 1);
  state.counters["jit"] = jit;
}

void BM_oneDNN(benchmark::State& state) {
  const Product p = product_of(state);
  omp_set_num_threads(bench_threads());
  bool ok = true;
  library_row(state, p, onednn_of(p, &ok), omp_get_max_threads());
  if (!ok) state.SkipWithError("dnnl_sgemm failed");
  let_workers_sleep();
}

// lazytrace and the three libraries side by side: one iteration is a round, a burst of each
// (about 10 ms; the order turning by one each round), each library's burst timed against
// lazytrace's of the same round. Threaded libraries' workers are let sleep after their
// bursts, outside the timing, as in their rows.
void BM_Paired(benchmark::State& state) {
  const Product p = product_of(state);
  lt::manual_seed(0);
  lt::Tensor ta = p.ta ? lt::randn({p.k, p.m}) : lt::randn({p.m, p.k});
  lt::Tensor tb = p.tb ? lt::randn({p.n, p.k}) : lt::randn({p.k, p.n});
  lt::sync({ta, tb});
  AlignedFloats a = random_floats(p.m * p.k, 1), b = random_floats(p.k * p.n, 2);
  AlignedFloats c = random_floats(p.m * p.n, 3);
  bool ok = true;
  struct Way {
    const char* name;
    Multiply multiply;
    bool threaded;
  };
  Way ways[] = {{"lazytrace",
                 [&](const float*, const float*, float*) {
                   lt::Tensor r =
                       lt::matmul(p.ta ? lt::transpose(ta) : ta, p.tb ? lt::transpose(tb) : tb);
                   lt::sync({r});
                   benchmark::DoNotOptimize(r.impl().get());
                 },
                 false},
                {"openblas", openblas_of(p), true},
                {"onednn", onednn_of(p, &ok), true},
                {"libxsmm", libxsmm_of(p), false}};
  constexpr int kWays = 4;
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // A burst: 2 ms of untimed calls first (after a pause the threads, and the VM's cores,
  // wake up slowly), then `calls` timed ones (0: as many as 10 ms take; returns the count).
  auto burst = [&](int w, int64_t& calls, bool pause = true) {
    if (w == 1) openblas_set_num_threads(bench_threads());
    if (w == 2) omp_set_num_threads(bench_threads());
    for (auto t0 = Clock::now(); seconds_since(t0) < 2e-3;)
      ways[w].multiply(a.get(), b.get(), c.get());
    const auto t0 = Clock::now();
    int64_t done = 0;
    while (calls > 0 ? done < calls : seconds_since(t0) < 1e-2) {
      ways[w].multiply(a.get(), b.get(), c.get());
      ++done;
    }
    const double t = seconds_since(t0);
    calls = done;
    if (w == 1) openblas_set_num_threads(1);  // lazytrace's setting
    if (pause && ways[w].threaded) let_workers_sleep();
    return t;
  };
  // each way checked, then warmed up (lazytrace's kernel choice, the libraries' generated
  // code) with its count of calls for a burst of about 10 ms; one pause after all of them
  {
    const lt::Tensor r = lt::matmul(p.ta ? lt::transpose(ta) : ta, p.tb ? lt::transpose(tb) : tb);
    if (!spot_check(p, ta.to_vector<float>().data(), tb.to_vector<float>().data(),
                    r.to_vector<float>().data())) {
      state.SkipWithError("lazytrace's matmul differs from a float64 dot product");
      return;
    }
  }
  int64_t calls[kWays] = {};
  for (int w = 0; w < kWays; ++w) {
    std::fill(c.get(), c.get() + p.m * p.n, std::numeric_limits<float>::quiet_NaN());
    burst(w, calls[w], false);
    if (w > 0 && (!ok || !spot_check(p, a.get(), b.get(), c.get()))) {
      state.SkipWithError((std::string(ways[w].name) + "'s product differs from a float64 dot "
                                                       "product")
                              .c_str());
      return;
    }
  }
  let_workers_sleep();
  std::vector<double> ratios[kWays];  // ratios[w]: way w's time per call / lazytrace's
  std::vector<double> times[kWays];   // per call, each round
  int64_t round = 0;
  for (auto _ : state) {
    double per_call[kWays];
    for (int i = 0; i < kWays; ++i) {
      const int w = static_cast<int>((i + round) % kWays);
      per_call[w] = burst(w, calls[w]) / static_cast<double>(calls[w]);
    }
    for (int w = 0; w < kWays; ++w) times[w].push_back(per_call[w]);
    for (int w = 1; w < kWays; ++w) ratios[w].push_back(per_call[w] / per_call[0]);
    ++round;
  }
  for (int w = 0; w < kWays; ++w) {  // the medians, as GFLOP/s
    std::sort(times[w].begin(), times[w].end());
    state.counters[std::string("gflops_") + ways[w].name] =
        2e-9 * static_cast<double>(p.m * p.n * p.k) / times[w][times[w].size() / 2];
  }
  double best = std::numeric_limits<double>::infinity();
  for (int w = 1; w < kWays; ++w) {
    std::sort(ratios[w].begin(), ratios[w].end());
    const double median = ratios[w][ratios[w].size() / 2];
    state.counters[std::string("vs_") + ways[w].name] = median;
    best = std::min(best, median);
  }
  state.counters["vs_best"] = best;  // the fastest library's time against lazytrace's
  state.counters["rounds"] = static_cast<double>(round);
}

// Shape after shape, the five rows of each (decoder_products' shapes).
void register_rows() {
  const std::pair<const char*, void (*)(benchmark::State&)> rows[] = {
      {"BM_Lazytrace", BM_Lazytrace},
      {"BM_LazytraceFixedRule", BM_LazytraceFixedRule},
      {"BM_OpenBLAS", BM_OpenBLAS},
      {"BM_libxsmm", BM_libxsmm},
      {"BM_oneDNN", BM_oneDNN}};
  for (const std::vector<int64_t>& args : bench::decoder_product_args())
    for (const auto& [name, fn] : rows)
      benchmark::RegisterBenchmark(name, fn)
          ->ArgNames({"tokens", "hidden", "inter", "product"})
          ->Args(args)
          ->UseRealTime();
  for (const std::vector<int64_t>& args : bench::decoder_product_args())
    benchmark::RegisterBenchmark("BM_Paired", BM_Paired)
        ->ArgNames({"tokens", "hidden", "inter", "product"})
        ->Args(args)
        ->UseRealTime();
}

// A table, not a switch: oneDNN's list of instruction sets grows between versions.
std::string isa_name(dnnl_cpu_isa_t isa) {
  const std::pair<dnnl_cpu_isa_t, const char*> names[] = {
      {dnnl_cpu_isa_sse41, "sse41"},
      {dnnl_cpu_isa_avx, "avx"},
      {dnnl_cpu_isa_avx2, "avx2"},
      {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
      {dnnl_cpu_isa_avx512_core, "avx512_core"},
      {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
      {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
      {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
  };
  for (const auto& [value, name] : names)
    if (value == isa) return name;
  return "isa#" + std::to_string(static_cast<int>(isa));
}

std::string runtime_name(unsigned runtime) {
  switch (runtime) {
    case DNNL_RUNTIME_SEQ:
      return "seq";
    case DNNL_RUNTIME_OMP:
      return "omp";
    case DNNL_RUNTIME_TBB:
      return "tbb";
    case DNNL_RUNTIME_THREADPOOL:
      return "threadpool";
    default:
      return "#" + std::to_string(runtime);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const dnnl_version_t* v = dnnl_version();
  benchmark::AddCustomContext("threads", std::to_string(bench_threads()));
  benchmark::AddCustomContext(
      "openblas", std::string(openblas_get_config()) + " core " + openblas_get_corename());
  benchmark::AddCustomContext("onednn", std::to_string(v->major) + "." + std::to_string(v->minor) +
                                            "." + std::to_string(v->patch) + " runtime " +
                                            runtime_name(v->cpu_runtime) + " isa " +
                                            isa_name(dnnl_get_effective_cpu_isa()));
  benchmark::AddCustomContext("libxsmm", LIBXSMM_VERSION);
  register_rows();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fprintf(stderr, "lazytrace's kernel choices:\n%s", lt::debug::kernel_choices().c_str());
  return 0;
}
