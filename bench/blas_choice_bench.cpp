// Why OpenBLAS: cblas_sgemm against oneDNN's dnnl_sgemm (row-major, 'N', 'N') at the decoder
// shapes of kernels_bench's matmul, in GFLOP/s.
//
// Threads: both libraries get the same count, lazytrace's (LAZYTRACE_NUM_THREADS, else the
// core count): OpenBLAS through openblas_set_num_threads, oneDNN (Debian's build uses the
// OpenMP runtime, libgomp) through omp_set_num_threads. Left alone, each picks its own
// count (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, else every core), so we set both; the
// "threads" counter is what each library reports back after being set.
// The two thread pools coexist in one process: after a call, OpenBLAS's pthreads and
// libgomp's workers spin for a while before sleeping and can steal cores from the other
// library. So all OpenBLAS runs come first and all oneDNN runs after them (registration
// order), never interleaved, with a pause in between, and each run starts with untimed
// warm-up calls. Run one library alone with --benchmark_filter=OpenBLAS (or oneDNN).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include <lazytrace/lazytrace.h>

#include "gemm_shapes.h"
#include "runtime/thread_pool.h"

namespace {

using bench::AlignedFloats;
using bench::decoder_shapes;
using bench::Gemm;
using bench::gemm_of;
using bench::random_floats;

int bench_threads() {
  return lt::runtime::num_threads();
}

void openblas_sgemm(const Gemm& g, const float* a, const float* b, float* c) {
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

bool onednn_sgemm(const Gemm& g, const float* a, const float* b, float* c) {
  return dnnl_sgemm('N', 'N', g.m, g.n, g.k, 1.0f, a, g.k, b, g.n, 0.0f, c, g.n) == dnnl_success;
}

void set_counters(benchmark::State& state, const Gemm& g, int threads) {
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * static_cast<double>(g.m * g.n * g.k),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

void BM_Sgemm_OpenBLAS(benchmark::State& state) {
  const Gemm g = gemm_of(state);
  openblas_set_num_threads(bench_threads());
  AlignedFloats a = random_floats(g.m * g.k, 1), b = random_floats(g.k * g.n, 2);
  AlignedFloats c = random_floats(g.m * g.n, 3);
  for (int i = 0; i < 3; ++i) openblas_sgemm(g, a.get(), b.get(), c.get());
  for (auto _ : state) {
    openblas_sgemm(g, a.get(), b.get(), c.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, g, openblas_get_num_threads());
}
BENCHMARK(BM_Sgemm_OpenBLAS)->Apply(decoder_shapes)->UseRealTime();

void BM_Sgemm_oneDNN(benchmark::State& state) {
  const Gemm g = gemm_of(state);
  static bool first = true;
  if (first) {  // let OpenBLAS's idle workers stop spinning (2^28 cycles, about 0.1 s)
    first = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  omp_set_num_threads(bench_threads());
  AlignedFloats a = random_floats(g.m * g.k, 1), b = random_floats(g.k * g.n, 2);
  AlignedFloats c = random_floats(g.m * g.n, 3);
  // Warm-up (oneDNN JIT-generates its kernels on first use), then a spot check of 64
  // entries against plain dot products; not against OpenBLAS, whose workers would wake
  // and spin through the timed loop.
  for (int i = 0; i < 3; ++i)
    if (!onednn_sgemm(g, a.get(), b.get(), c.get())) {
      state.SkipWithError("dnnl_sgemm failed");
      return;
    }
  std::mt19937 gen(5);
  for (int s = 0; s < 64; ++s) {
    const int64_t i = static_cast<int64_t>(gen() % static_cast<uint32_t>(g.m));
    const int64_t j = static_cast<int64_t>(gen() % static_cast<uint32_t>(g.n));
    double ref = 0;
    for (int64_t q = 0; q < g.k; ++q)
      ref += static_cast<double>(a[i * g.k + q]) * static_cast<double>(b[q * g.n + j]);
    if (std::abs(ref - static_cast<double>(c[i * g.n + j])) > 1e-3 * (1.0 + std::abs(ref))) {
      state.SkipWithError("dnnl_sgemm differs from a plain dot product");
      return;
    }
  }
  for (auto _ : state) {
    onednn_sgemm(g, a.get(), b.get(), c.get());
    benchmark::ClobberMemory();
  }
  set_counters(state, g, omp_get_max_threads());
}
BENCHMARK(BM_Sgemm_oneDNN)->Apply(decoder_shapes)->UseRealTime();

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
  const int threads = bench_threads();
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
  const dnnl_version_t* v = dnnl_version();
  benchmark::AddCustomContext("threads (both libraries)", std::to_string(threads));
  benchmark::AddCustomContext(
      "openblas", std::string(openblas_get_config()) + " core " + openblas_get_corename());
  benchmark::AddCustomContext("onednn", std::to_string(v->major) + "." + std::to_string(v->minor) +
                                            "." + std::to_string(v->patch) + " runtime " +
                                            runtime_name(v->cpu_runtime) + " isa " +
                                            isa_name(dnnl_get_effective_cpu_isa()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
