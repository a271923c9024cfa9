// Kernel-level cost of lazytrace against its baselines.
//
//   BM_Matmul_Lazytrace / BM_Matmul_RawSgemm   decoder projections, GFLOP/s (target: >= 0.9x)
//   BM_FusedChain8_4M / BM_Unfused8_4M         8 elementwise ops over 4M floats: one graph
//                                              against one graph (one sync) per op; the
//                                              "Cheap" pair: arithmetic ops only; _44M: the
//                                              fused chains at 44M floats; off:N a pass off
//                                              (3: jit_fused, the chain interpreted;
//                                              4: jit_interleave; 5: jit_ranges;
//                                              6: stream_stores_choice)
//   BM_Chain8Loop_*, BM_Chain8CheapLoop_*      the same chains as one plain compiled loop
//   BM_AdamW_*                                 one AdamW step over 44M floats
//   BM_Bandwidth_*                             the memory bandwidth they are held against
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lazytrace/lazytrace.h>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/reduce_row.h"
#include "chain_loop.h"
#include "gemm_shapes.h"
#include "runtime/thread_pool.h"

namespace {

int64_t metric(const char* name) {
  return lt::metrics::counter(name);
}
int64_t timer(const char* name) {
  return lt::metrics::timer_ns(name);
}

using bench::AlignedFloats;
using bench::decoder_shapes;
using bench::Gemm;
using bench::gemm_of;
using bench::random_floats;

void set_gemm_counters(benchmark::State& state, const Gemm& g) {
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * static_cast<double>(g.m * g.n * g.k),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = lt::runtime::num_threads();
}

// Inputs materialized before timing; each iteration records one matmul and syncs it, a
// compile-cache hit after the warm-up. The result (a fresh output buffer each run, as in
// real use) is released at the end of the iteration, inside the timing.
void BM_Matmul_Lazytrace(benchmark::State& state) {
  const Gemm g = gemm_of(state);
  lt::manual_seed(0);
  lt::Tensor a = lt::randn({g.m, g.k});
  lt::Tensor b = lt::randn({g.k, g.n});
  lt::sync({a, b});
  {  // warm-up: compile (cache miss) and a correctness spot check against raw sgemm
    lt::Tensor c = lt::matmul(a, b);
    lt::sync({c});
    const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
    const std::vector<float> vc = c.to_vector<float>();
    std::vector<float> ref(vc.size());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(g.m),
                static_cast<int>(g.n), static_cast<int>(g.k), 1.0f, va.data(),
                static_cast<int>(g.k), vb.data(), static_cast<int>(g.n), 0.0f, ref.data(),
                static_cast<int>(g.n));
    for (size_t i = 0; i < ref.size(); ++i)
      if (std::abs(ref[i] - vc[i]) > 1e-3f * (1.0f + std::abs(ref[i]))) {
        state.SkipWithError("lazytrace matmul differs from cblas_sgemm");
        return;
      }
  }
  const int64_t miss0 = metric("CacheMiss");
  for (auto _ : state) {
    auto c = lt::matmul(a, b);
    lt::sync({c});
    benchmark::DoNotOptimize(c.impl().get());
  }
  if (metric("CacheMiss") != miss0) state.SkipWithError("the matmul graph recompiled in the loop");
  set_gemm_counters(state, g);
}
BENCHMARK(BM_Matmul_Lazytrace)->Apply(decoder_shapes)->UseRealTime();

// cblas_sgemm on preallocated buffers, with OpenBLAS on the thread count lazytrace uses.
void BM_Matmul_RawSgemm(benchmark::State& state) {
  const Gemm g = gemm_of(state);
  openblas_set_num_threads(lt::runtime::num_threads());
  AlignedFloats a = random_floats(g.m * g.k, 1), b = random_floats(g.k * g.n, 2);
  AlignedFloats c = random_floats(g.m * g.n, 3);  // touched, so no first-use page faults
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.get(), k, b.get(), n,
                0.0f, c.get(), n);
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, g);
}
BENCHMARK(BM_Matmul_RawSgemm)->Apply(decoder_shapes)->UseRealTime();

// ---------------------------------------------------------------------------------------
// 8 elementwise ops over 4M floats (16 MiB), fused (record all 8, one sync: one graph, one
// kernel) against unfused (a sync after every op: 8 graphs, each its own kernel reading and
// writing 16 MiB). All graphs are compile-cache hits inside the timing.
//
// The main chain is mul, add, tanh, mul, sub, sigmoid, mul (by x), relu. Its two
// transcendentals cost far more per element than the memory traffic that fusion saves, so
// the "Cheap" pair runs 8 arithmetic ops (mul, add, relu, mul, sub, abs, mul by x, add):
// memory-bound, which is where fusion should show.
constexpr int64_t kElems = int64_t{4} << 20;
constexpr int kChain = 8;

// Op i of the chain; the cheap chain swaps its three costly ops (tanh, sigmoid, relu at
// the end) for relu, abs and an add.
lt::Tensor chain_op(int i, const lt::Tensor& y, const lt::Tensor& x, bool cheap) {
  switch (i) {
    case 0:
      return y * 1.5f;
    case 1:
      return y + 0.25f;
    case 2:
      return cheap ? lt::relu(y) : lt::tanh(y);
    case 3:
      return y * 2.0f;
    case 4:
      return y - 0.5f;
    case 5:
      return cheap ? lt::abs(y) : lt::sigmoid(y);
    case 6:
      return y * x;
    default:
      return cheap ? y + 0.125f : lt::relu(y);
  }
}

// The fused chains' A/Bs: argument 0 runs with every pass, 1 without prefetch_tiles, 2
// without stream_stores, 3 without jit_fused (the chain interpreted), 4 without
// jit_interleave, 5 without jit_ranges, 6 without stream_stores_choice.
const std::vector<std::string> kChainPassOff[] = {{},
                                                  {"prefetch_tiles"},
                                                  {"stream_stores"},
                                                  {"jit_fused"},
                                                  {"jit_interleave"},
                                                  {"jit_ranges"},
                                                  {"stream_stores_choice"}};

// A fused chain's registration: every pass on, then each of the first `Off` switched off,
// then jit_fused, jit_interleave, jit_ranges and stream_stores_choice off.
template <int Off>
void pass_switches(benchmark::internal::Benchmark* b) {
  b->ArgName("off")
      ->DenseRange(0, Off)
      ->Arg(3)
      ->Arg(4)
      ->Arg(5)
      ->Arg(6)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

void chain_bench(benchmark::State& state, bool fused, bool cheap, int64_t elems = kElems) {
  const auto before = lt::debug::set_disabled_passes(kChainPassOff[fused ? state.range(0) : 0]);
  lt::clear_caches();
  lt::manual_seed(0);
  lt::Tensor x = lt::randn({elems});
  lt::sync({x});
  auto run_chain = [&] {
    lt::Tensor y = x;
    for (int i = 0; i < kChain; ++i) {
      y = chain_op(i, y, x, cheap);
      if (!fused) lt::sync({y});  // each op its own graph
    }
    if (fused) lt::sync({y});  // all eight in one graph
    return y;
  };
  for (int i = 0; i < 2; ++i) run_chain();  // compiles (cache misses) and warms the heap
  const int64_t miss0 = metric("CacheMiss");
  const int64_t exec0 = metric("ExecuteCount");
  const int64_t kern0 = timer("KernelTime");
  for (auto _ : state) {
    lt::Tensor y = run_chain();
    benchmark::DoNotOptimize(y.impl().get());
  }
  lt::debug::set_disabled_passes(before);
  lt::clear_caches();
  if (metric("CacheMiss") != miss0) state.SkipWithError("a graph recompiled in the loop");
  const auto iters = static_cast<double>(state.iterations());
  state.counters["graphs_per_iter"] = static_cast<double>(metric("ExecuteCount") - exec0) / iters;
  state.counters["kernel_ms"] = static_cast<double>(timer("KernelTime") - kern0) / 1e6 / iters;
  state.counters["threads"] = lt::runtime::num_threads();
  state.SetItemsProcessed(state.iterations() * elems);
  // what the fused kernel must move: x read once, y written once
  state.SetBytesProcessed(state.iterations() * elems * 2 * int64_t{sizeof(float)});
}

// The same chains as one plain loop over the threads (chain_loop.h): the yardstick.
void chain_loop_bench(benchmark::State& state, bool cheap, int64_t elems = kElems) {
  AlignedFloats x = random_floats(elems, 1), y = random_floats(elems, 2);
  const bool avx512 = lt::cpu::has_avx512();
  if (!avx512 && !lt::cpu::has_avx2_fma()) {
    state.SkipWithError("the yardstick loop needs AVX2 or AVX-512");
    return;
  }
  auto run = [&] {
    lt::runtime::parallel_for(elems, 4096, [&](int64_t b, int64_t e) {
      if (avx512)
        bench::chain_loop_avx512(x.get(), y.get(), b, e, cheap);
      else
        bench::chain_loop_avx2(x.get(), y.get(), b, e, cheap);
    });
  };
  run();
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.counters["avx512"] = avx512;
  state.counters["threads"] = lt::runtime::num_threads();
  state.SetItemsProcessed(state.iterations() * elems);
  state.SetBytesProcessed(state.iterations() * elems * 2 * int64_t{sizeof(float)});
}

void BM_FusedChain8_4M(benchmark::State& state) {
  chain_bench(state, true, false);
}
void BM_Unfused8_4M(benchmark::State& state) {
  chain_bench(state, false, false);
}
void BM_FusedChain8Cheap_4M(benchmark::State& state) {
  chain_bench(state, true, true);
}
void BM_Unfused8Cheap_4M(benchmark::State& state) {
  chain_bench(state, false, true);
}
void BM_Chain8Loop_4M(benchmark::State& state) {
  chain_loop_bench(state, false);
}
void BM_Chain8CheapLoop_4M(benchmark::State& state) {
  chain_loop_bench(state, true);
}
BENCHMARK(BM_Chain8Loop_4M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Chain8CheapLoop_4M)->Unit(benchmark::kMillisecond)->UseRealTime();
// The fused chains and their yardstick at AdamW's parameter size, far beyond the caches.
constexpr int64_t kElemsBig = int64_t{100} * 1024 * 442;
void BM_FusedChain8_44M(benchmark::State& state) {
  chain_bench(state, true, false, kElemsBig);
}
void BM_FusedChain8Cheap_44M(benchmark::State& state) {
  chain_bench(state, true, true, kElemsBig);
}
void BM_Chain8Loop_44M(benchmark::State& state) {
  chain_loop_bench(state, false, kElemsBig);
}
void BM_Chain8CheapLoop_44M(benchmark::State& state) {
  chain_loop_bench(state, true, kElemsBig);
}
BENCHMARK(BM_FusedChain8_44M)->Apply(pass_switches<2>);
BENCHMARK(BM_FusedChain8Cheap_44M)->Apply(pass_switches<2>);
BENCHMARK(BM_Chain8Loop_44M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Chain8CheapLoop_44M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FusedChain8_4M)->Apply(pass_switches<1>);
BENCHMARK(BM_Unfused8_4M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FusedChain8Cheap_4M)->Apply(pass_switches<1>);
BENCHMARK(BM_Unfused8Cheap_4M)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------------------
// One AdamW step over the spec decoder's parameter count at 100 layers (44 M floats in one
// stacked tensor): the fused update (one adamw_update op: reads p, grad, m, v once, writes
// p, m, v once) against the same update op by op (AdamWOptions::fused = false: one fused
// elementwise program of about 27 instructions). Same results, bit for bit (nn_test).
// AdamW steps on w, the gradient from grad() each time; two first (compile, and the
// buffer cache's first blocks). Each step syncs the parameter and the optimizer's moments.
template <typename G>
void adamw_steps(benchmark::State& state, lt::Tensor& w, lt::optim::AdamW& opt, G grad) {
  auto step = [&] {
    w.set_grad(grad());
    opt.step();
    opt.zero_grad();
    lt::sync();
  };
  for (int i = 0; i < 2; ++i) step();
  for (auto _ : state) step();
  state.counters["threads"] = lt::runtime::num_threads();
  state.SetItemsProcessed(state.iterations() * w.numel());
  // what the fused update must move: p, grad, m, v read once; p, m, v written once
  state.SetBytesProcessed(state.iterations() * w.numel() * 7 * int64_t{sizeof(float)});
}

void adamw_bench(benchmark::State& state, bool fused) {
  lt::manual_seed(0);
  lt::Tensor w = lt::randn({100, 1024, 442}).requires_grad_();
  lt::Tensor g = lt::randn({100, 1024, 442}) * 1e-2f;
  lt::sync({w, g});
  lt::optim::AdamW opt({w}, {.lr = 1e-3, .fused = fused});
  adamw_steps(state, w, opt, [&] { return g; });
}

void BM_AdamW_Fused_44M(benchmark::State& state) {
  adamw_bench(state, true);
}
void BM_AdamW_OpByOp_44M(benchmark::State& state) {
  adamw_bench(state, false);
}
BENCHMARK(BM_AdamW_Fused_44M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_OpByOp_44M)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same update with the gradient a weight's over 16 tokens, dyᵀ x per layer (what scan
// hands AdamW for stacked weights): computed by the update beside it, block by block in
// cache, against the gradient made first (through memory) and then the update.
void weight_grad_adamw_bench(benchmark::State& state, bool through_memory) {
  lt::manual_seed(0);
  lt::Tensor w = lt::randn({100, 1024, 442}).requires_grad_();
  lt::Tensor dy = lt::randn({100, 16, 1024}) * 1e-2f, x = lt::randn({100, 16, 442});
  lt::sync({w, dy, x});
  lt::optim::AdamW opt({w}, {.lr = 1e-3});
  adamw_steps(state, w, opt, [&] {
    lt::Tensor g = lt::matmul(lt::transpose(dy, -1, -2), x);
    if (through_memory) lt::sync({g});
    return g;
  });
}

void BM_WeightGradAdamW_InTheUpdate_44M(benchmark::State& state) {
  weight_grad_adamw_bench(state, false);
}
void BM_WeightGradAdamW_ThroughMemory_44M(benchmark::State& state) {
  weight_grad_adamw_bench(state, true);
}
BENCHMARK(BM_WeightGradAdamW_InTheUpdate_44M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WeightGradAdamW_ThroughMemory_44M)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------------------
// The machine's memory bandwidth, the yardstick of the fused chain and the fused AdamW
// update (their bytes_per_second against these): n floats read and n written per
// iteration, split over lazytrace's threads as its kernels are, at the chain's footprint
// (4M floats: 16 MiB each way) and at AdamW's parameter size (44M floats). Three ways, the
// fastest being the machine's figure: memcpy and a scaled copy y = 2x (the loop the
// compiler vectorizes), both with plain stores (each thread's piece, 256 KiB, is below
// where glibc's memcpy turns to non-temporal ones), which read each destination line before
// writing it; and a copy with non-temporal stores, as the fused kernels write (stream_stores),
// which moves only the bytes counted.
enum class Copy { kMemcpy, kScale, kStream };
void bandwidth_bench(benchmark::State& state, Copy how) {
  const int64_t n = state.range(0);
  AlignedFloats x = random_floats(n, 1), y = random_floats(n, 2);  // both pages touched
  float* xs = x.get();
  float* ys = y.get();
  const bool avx512 = lt::cpu::has_avx512();
  if (how == Copy::kStream && !avx512 && !lt::cpu::has_avx2_fma()) {
    state.SkipWithError("the streaming copy needs AVX2 or AVX-512");
    return;
  }
  auto run = [&] {
    lt::runtime::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      if (how == Copy::kScale) {
        for (int64_t i = b; i < e; ++i) ys[i] = 2.0f * xs[i];
      } else if (how == Copy::kMemcpy) {
        std::memcpy(ys + b, xs + b, static_cast<size_t>(e - b) * sizeof(float));
      } else if (avx512) {
        bench::stream_copy_avx512(xs, ys, b, e);
      } else {
        bench::stream_copy_avx2(xs, ys, b, e);
      }
    });
  };
  run();
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(ys);
    benchmark::ClobberMemory();
  }
  state.counters["threads"] = lt::runtime::num_threads();
  state.SetBytesProcessed(state.iterations() * n * 2 * int64_t{sizeof(float)});
}
void BM_Bandwidth_Memcpy(benchmark::State& state) {
  bandwidth_bench(state, Copy::kMemcpy);
}
void BM_Bandwidth_Scale(benchmark::State& state) {
  bandwidth_bench(state, Copy::kScale);
}
void BM_Bandwidth_Stream(benchmark::State& state) {
  bandwidth_bench(state, Copy::kStream);
}
// The rows of a reduction (reduce_row.h) as the small steps of a training step make them: 32
// rows of 8 (a softmax's max and sum at 8 tokens), of 16, and of 128 (a norm's mean at hidden
// 128); state.range(1) 0: sum (in float64), 1: max.
static void BM_ReduceRows(benchmark::State& state) {
  const int64_t n = state.range(0), rows = 32;
  std::vector<float> x(static_cast<size_t>(rows * n));
  std::mt19937 gen(5);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(gen);
  for (auto _ : state) {
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r)
      acc += state.range(1) == 0 ? lazytrace::cpu::sum_row_f32(x.data() + r * n, n)
                                 : lazytrace::cpu::max_row_f32(x.data() + r * n, n);
    benchmark::DoNotOptimize(acc);
  }
  state.SetItemsProcessed(state.iterations() * rows);
}
BENCHMARK(BM_ReduceRows)->ArgsProduct({{8, 16, 128}, {0, 1}});

BENCHMARK(BM_Bandwidth_Memcpy)
    ->Arg(kElems)
    ->Arg(kElemsBig)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bandwidth_Scale)
    ->Arg(kElems)
    ->Arg(kElemsBig)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Bandwidth_Stream)
    ->Arg(kElems)
    ->Arg(kElemsBig)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
