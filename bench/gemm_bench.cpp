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
// short bursts side by side (their order turning each round, a pause after each), each
// library's time per call against lazytrace's in the same round, the median over rounds
// (`vs_<library>`, above 1 where lazytrace is faster; `vs_best`: against the fastest
// library). Registered only when --benchmark_filter names it: --benchmark_filter=Paired
// --benchmark_min_time=10 gives about 13 rounds a shape, 12 to 13 minutes in all.
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
#include "paired.h"
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
// up to half speed (docs/gemm.md, the Intel Xeon machine).
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

// lazytrace's operands and one call: the product recorded (through the transposed views the
// layout needs) and synced, a compile-cache hit after the first, the result released, as in
// real use. The operands are the libraries' own kind of buffer (random_floats, seeds 1 and 2)
// read in place (lt::from_blob), so every row reads the same values from memory placed alike;
// BM_Paired hands lazytrace the very arrays the libraries read.
struct LtProduct {
  Product p;
  AlignedFloats own_a, own_b;  // where no arrays were given
  const float *pa, *pb;
  lt::Tensor a, b;

  explicit LtProduct(const Product& product, const float* a_in = nullptr,
                     const float* b_in = nullptr)
      : p(product),
        own_a(a_in ? nullptr : random_floats(p.m * p.k, 1)),
        own_b(b_in ? nullptr : random_floats(p.k * p.n, 2)),
        pa(a_in ? a_in : own_a.get()),
        pb(b_in ? b_in : own_b.get()),
        a(lt::from_blob(pa, p.ta ? lt::Shape{p.k, p.m} : lt::Shape{p.m, p.k}, lt::float32,
                        nullptr)),
        b(lt::from_blob(pb, p.tb ? lt::Shape{p.n, p.k} : lt::Shape{p.k, p.n}, lt::float32,
                        nullptr)) {}
  lt::Tensor synced() const {
    lt::Tensor c = lt::matmul(p.ta ? lt::transpose(a) : a, p.tb ? lt::transpose(b) : b);
    lt::sync({c});
    return c;
  }
  void call() const { benchmark::DoNotOptimize(synced().impl().get()); }
  // one call's result against float64 dot products
  bool right() const { return spot_check(p, pa, pb, synced().to_vector<float>().data()); }
};

constexpr const char* kLtWrong = "lazytrace's matmul differs from a float64 dot product";
constexpr const char* kRecompiled = "the matmul graph recompiled in the loop";

// lazytrace: inputs materialized before timing; each iteration one call (LtProduct).
void lazytrace_row(benchmark::State& state, bool choice) {
  lt::debug::set_disabled_passes(choice ? std::vector<std::string>{}
                                        : std::vector<std::string>{"gemm_choice"});
  const LtProduct product(product_of(state));
  if (!product.right()) {
    lt::debug::set_disabled_passes({});
    state.SkipWithError(kLtWrong);
    return;
  }
  const int64_t miss0 = lt::metrics::counter("CacheMiss");
  for (auto _ : state) product.call();
  if (lt::metrics::counter("CacheMiss") != miss0) state.SkipWithError(kRecompiled);
  lt::debug::set_disabled_passes({});
  set_counters(state, product.p, bench_threads());
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
// (the order turning by one each round), each library's time per call against lazytrace's in
// the same round. Every burst is followed by a pause, outside the timing, so that each way
// starts its burst alike (after another's pause: threaded libraries' workers asleep, the
// cores kept busy).
void BM_Paired(benchmark::State& state) {
  const Product p = product_of(state);
  lt::debug::set_disabled_passes({});
  AlignedFloats a = random_floats(p.m * p.k, 1), b = random_floats(p.k * p.n, 2);
  AlignedFloats c = random_floats(p.m * p.n, 3);
  const LtProduct product(p, a.get(), b.get());
  bool ok = true;
  // enter and leave set a library's threads around its burst (lazytrace keeps OpenBLAS on one
  // thread; OpenMP's count is the calling thread's own, which lazytrace's calls set aside)
  struct Way {
    const char* name;
    Multiply multiply;
    std::function<void()> enter = [] {}, leave = [] {};
  };
  Way ways[] = {{"lazytrace", [&](const float*, const float*, float*) { product.call(); }},
                {"openblas", openblas_of(p), [] { openblas_set_num_threads(bench_threads()); },
                 [] { openblas_set_num_threads(1); }},
                {"onednn", onednn_of(p, &ok), [] { omp_set_num_threads(bench_threads()); }},
                {"libxsmm", libxsmm_of(p)}};
  constexpr int kWays = 4;
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // A burst: 2 ms of untimed calls, then `calls` timed ones (0: as many as 10 ms take, and
  // `calls` becomes that count); returns the timed calls' seconds.
  auto burst = [&](Way& way, int64_t& calls) {
    way.enter();
    for (auto t0 = Clock::now(); seconds_since(t0) < 2e-3;) way.multiply(a.get(), b.get(), c.get());
    const auto t0 = Clock::now();
    int64_t done = 0;
    while (calls > 0 ? done < calls : seconds_since(t0) < 1e-2) {
      way.multiply(a.get(), b.get(), c.get());
      ++done;
    }
    const double t = seconds_since(t0);
    calls = done;
    way.leave();
    return t;
  };
  // each way checked and warmed up (lazytrace's kernel choice, the libraries' generated
  // code), its count of calls for a burst of about 10 ms taken; then one pause
  if (!product.right()) {
    state.SkipWithError(kLtWrong);
    return;
  }
  int64_t calls[kWays] = {};
  for (int w = 0; w < kWays; ++w) {
    std::fill(c.get(), c.get() + p.m * p.n, std::numeric_limits<float>::quiet_NaN());
    burst(ways[w], calls[w]);
    if (w > 0 && (!ok || !spot_check(p, a.get(), b.get(), c.get()))) {
      state.SkipWithError(
          (std::string(ways[w].name) + "'s product differs from a float64 dot product").c_str());
      return;
    }
  }
  let_workers_sleep();
  const int64_t miss0 = lt::metrics::counter("CacheMiss");
  std::vector<double> per_call[kWays], ratios[kWays];  // ratios[w]: way w's against lazytrace's
  int64_t round = 0;
  for (auto _ : state) {
    double t[kWays];
    for (int i = 0; i < kWays; ++i) {
      const int w = static_cast<int>((i + round) % kWays);
      t[w] = burst(ways[w], calls[w]) / static_cast<double>(calls[w]);
      let_workers_sleep();
    }
    for (int w = 0; w < kWays; ++w) per_call[w].push_back(t[w]);
    for (int w = 1; w < kWays; ++w) ratios[w].push_back(t[w] / t[0]);
    ++round;
  }
  if (!ok) state.SkipWithError("dnnl_sgemm failed");
  if (lt::metrics::counter("CacheMiss") != miss0) state.SkipWithError(kRecompiled);
  const double flop = 2e-9 * static_cast<double>(p.m * p.n * p.k);
  double best = std::numeric_limits<double>::infinity();
  for (int w = 0; w < kWays; ++w) {
    state.counters[std::string("gflops_") + ways[w].name] = flop / bench::median(per_call[w]);
    if (w == 0) continue;
    const double vs = bench::median(ratios[w]);
    state.counters[std::string("vs_") + ways[w].name] = vs;
    best = std::min(best, vs);
  }
  state.counters["vs_best"] = best;  // the fastest library's time against lazytrace's
  state.counters["rounds"] = static_cast<double>(round);
}

// Shape after shape, the five rows of each (decoder_products' shapes); then, where asked for
// (`paired`), BM_Paired of each shape.
void register_rows(bool paired) {
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
  if (!paired) return;
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
  register_rows(bench::filter_names(argc, argv, "Paired"));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fprintf(stderr, "lazytrace's kernel choices:\n%s", lt::debug::kernel_choices().c_str());
  return 0;
}
