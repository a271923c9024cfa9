// Host-side cost of lazytrace: recording ops, and a sync whose compile is a cache hit.
//
//   BM_RecordElementwiseChain  ns per recorded op (target: 250 ns/op), nothing synced
//   BM_CacheHitSync1000Ops     record + sync of a 1,000-op graph over 16 floats, with the
//                              sync's host overhead (sync wall time minus KernelTime)
//   BM_SyncOneOp/<n>           one op recorded and synced, over n floats: what a call
//                              from an eager-style loop costs beyond its kernel (n = 16:
//                              one thread; n = 65,536: the kernel shared by the threads)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include <lazytrace/lazytrace.h>

namespace {

using lt::metrics::now_ns;

int64_t metric(const char* name) {
  return lt::metrics::counter(name);
}
int64_t timer(const char* name) {
  return lt::metrics::timer_ns(name);
}

// A materialized 16-float input, so that recording starts from a Data leaf.
lt::Tensor small_input() {
  lt::manual_seed(0);
  lt::Tensor x = lt::rand({16});
  lt::sync({x});
  return x;
}

// ---------------------------------------------------------------------------------------
// Recording only. The timed region is exactly the user code that records the chain
// (y = y * 1.0001f; y = y + 0.5f; ... 10,000 ops), including the Tensor handle churn of
// reassigning y. /1: every op with a number of its own (y * (1 + i * 1e-6f)), so that no
// op shares its constant node with another (pass share_scalars). Dropping the chain (freeing 10,000
// nodes) is done with the timer paused, and nothing is ever synced; the benchmark fails if a sync
// or a compile happens.
constexpr int kChainOps = 10000;

void BM_RecordElementwiseChain(benchmark::State& state) {
  const bool distinct = state.range(0) == 1;
  state.SetLabel(distinct ? "a number per op" : "two numbers repeated");
  const lt::Tensor x = small_input();
  const int64_t syncs0 = metric("SyncCount");
  const int64_t ops0 = metric("TraceCount");
  const int64_t trace0 = timer("TraceTime");
  int64_t record_ns = 0;
  for (auto _ : state) {
    const int64_t t0 = now_ns();
    lt::Tensor y = x;
    if (distinct)
      for (int i = 0; i < kChainOps / 2; ++i) {
        y = y * (1.0f + static_cast<float>(i) * 1e-6f);
        y = y + (0.5f + static_cast<float>(i) * 1e-6f);
      }
    else
      for (int i = 0; i < kChainOps / 2; ++i) {
        y = y * 1.0001f;
        y = y + 0.5f;
      }
    record_ns += now_ns() - t0;
    benchmark::DoNotOptimize(y.impl().get());
    state.PauseTiming();
    y = lt::Tensor();  // releases the pending chain without running it
    state.ResumeTiming();
  }
  const auto iters = static_cast<double>(state.iterations());
  const int64_t ops = metric("TraceCount") - ops0;
  if (metric("SyncCount") != syncs0) state.SkipWithError("a sync ran while recording");
  if (ops != static_cast<int64_t>(kChainOps) * state.iterations())
    state.SkipWithError("TraceCount does not match the number of ops recorded");
  // Wall time of the recording loop (our own clock, so PauseTiming overhead is excluded).
  state.counters["ns_per_op"] = static_cast<double>(record_ns) / (iters * kChainOps);
  // The library's own TraceTime: time inside the op functions (excludes handle churn).
  state.counters["trace_ns_per_op"] =
      static_cast<double>(timer("TraceTime") - trace0) / (iters * kChainOps);
  state.counters["ops_per_iter"] = static_cast<double>(ops) / iters;
  state.counters["ops"] =
      benchmark::Counter(kChainOps, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RecordElementwiseChain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------------------
// Record + sync of a 1,000-op graph over a tiny tensor, its compile a cache hit.
//
// Each block of 10 ops is mul, add, tanh, mul, sub, sigmoid, mul (y*y), add (+x), and then
// either relu, mul or (every 25th block) mean and sub: 1,000 recorded ops, 4 reductions.
// The scalars are graph parameters, so every iteration has the same structure.
lt::Tensor record_1000_ops(const lt::Tensor& x) {
  lt::Tensor y = x;
  for (int b = 0; b < 100; ++b) {
    y = y * 1.0001f;
    y = y + 0.5f;
    y = lt::tanh(y);
    y = y * 0.75f;
    y = y - 0.125f;
    y = lt::sigmoid(y);
    y = y * y;
    y = y + x;
    if (b % 25 == 24) {
      lt::Tensor m = lt::mean(y);
      y = y - m;
    } else {
      y = lt::relu(y);
      y = y * 1.5f;
    }
  }
  return y;
}

void BM_CacheHitSync1000Ops(benchmark::State& state) {
  const lt::Tensor x = small_input();
  {  // the one compile (cache miss), outside the timing
    lt::Tensor y = record_1000_ops(x);
    lt::sync({y});
  }
  const int64_t miss0 = metric("CacheMiss");
  const int64_t hit0 = metric("CacheHit");
  const int64_t ops0 = metric("TraceCount");
  const int64_t exec0 = timer("ExecuteTime");
  int64_t record_ns = 0, sync_ns = 0, kernel_ns = 0;
  for (auto _ : state) {
    const int64_t t0 = now_ns();
    lt::Tensor y = record_1000_ops(x);
    const int64_t t1 = now_ns();
    const int64_t k0 = timer("KernelTime");
    const int64_t t2 = now_ns();
    lt::sync({y});
    const int64_t t3 = now_ns();
    const int64_t k1 = timer("KernelTime");
    benchmark::DoNotOptimize(y.impl().get());
    record_ns += t1 - t0;
    sync_ns += t3 - t2;
    kernel_ns += k1 - k0;
  }
  const auto iters = static_cast<double>(state.iterations());
  const int64_t misses = metric("CacheMiss") - miss0;
  if (misses != 0) state.SkipWithError("the graph recompiled: the cache missed in the loop");
  if (metric("CacheHit") - hit0 != state.iterations())
    state.SkipWithError("expected one cache hit per iteration");
  const int64_t exec_ns = timer("ExecuteTime") - exec0;
  auto avg_us = [&](int64_t ns) { return static_cast<double>(ns) / 1e3 / iters; };
  state.counters["ops_per_iter"] = static_cast<double>(metric("TraceCount") - ops0) / iters;
  state.counters["record_us"] = avg_us(record_ns);
  state.counters["sync_us"] = avg_us(sync_ns);
  state.counters["kernel_us"] = avg_us(kernel_ns);
  // The host overhead of the sync alone: walk, cache lookup, binding, output allocation,
  // dispatch, and releasing the recorded nodes; everything but time inside kernels.
  state.counters["sync_host_us"] = avg_us(sync_ns - kernel_ns);
  // Of which inside Executable::run but outside kernels.
  state.counters["exec_host_us"] = avg_us(exec_ns - kernel_ns);
}
BENCHMARK(BM_CacheHitSync1000Ops)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---------------------------------------------------------------------------------------
// One op recorded and synced per iteration (y = x * s + 1 as one fused kernel), its
// compile a cache hit: the whole cost of a synced call, host side included.
void BM_SyncOneOp(benchmark::State& state) {
  lt::manual_seed(0);
  lt::Tensor x = lt::rand({state.range(0)});
  lt::sync({x});
  for (int i = 0; i < 2; ++i) {  // the compile, and the output buffer's first block
    lt::Tensor y = x * 0.5f + 1.0f;
    lt::sync({y});
  }
  const int64_t miss0 = metric("CacheMiss");
  const int64_t kernel0 = timer("KernelTime");
  for (auto _ : state) {
    lt::Tensor y = x * 0.5f + 1.0f;
    lt::sync({y});
    benchmark::DoNotOptimize(y.impl().get());
  }
  if (metric("CacheMiss") != miss0) state.SkipWithError("the graph recompiled in the loop");
  state.counters["kernel_us"] = static_cast<double>(timer("KernelTime") - kernel0) / 1e3 /
                                static_cast<double>(state.iterations());
}
BENCHMARK(BM_SyncOneOp)->Arg(16)->Arg(65536)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
