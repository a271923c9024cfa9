// A training step of the decoder (hidden 128, intermediate 512, 4 heads, 2 kv heads,
// 4 layers, vocab 256) on GPL-3 bytes with AdamW: forward, backward and update recorded
// into one graph and synced.
//
//   BM_TrainStep/B/T      a steady-state step (a compile-cache hit), and the shares of its
//                         wall time spent tracing, compiling and executing (lt::metrics)
//   BM_FirstTrainStep/B/T the same step with an empty compile cache (the graph is compiled),
//                         the alternative a cache hit saves
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>

#include <lazytrace/lazytrace.h>

#include "compiler/compile_cache.h"
#include "gpl_text.h"

namespace {

using lt::metrics::now_ns;

struct Trainer {
  std::shared_ptr<lt::nn::DecoderLM> model;
  std::unique_ptr<lt::optim::AdamW> opt;
  int64_t batch, seq;
  std::mt19937_64 rng{1};

  Trainer(int64_t b, int64_t t) : batch(b), seq(t) {
    lt::manual_seed(0);
    model = std::make_shared<lt::nn::DecoderLM>(lt::nn::DecoderConfig{.vocab = 256,
                                                                      .hidden = 128,
                                                                      .intermediate = 512,
                                                                      .heads = 4,
                                                                      .kv_heads = 2,
                                                                      .layers = 4,
                                                                      .max_seq = t});
    opt = std::make_unique<lt::optim::AdamW>(model->parameters(), lt::optim::AdamWOptions{});
  }

  float step() {
    std::vector<int64_t> tokens(static_cast<size_t>(batch * (seq + 1)));
    for (int64_t b = 0; b < batch; ++b) {
      const size_t start = rng() % (gpl_text().size() - seq - 1);
      for (int64_t i = 0; i <= seq; ++i)
        tokens[b * (seq + 1) + i] = static_cast<unsigned char>(gpl_text()[start + i]);
    }
    lt::Tensor data = lt::tensor(tokens, {batch, seq + 1});
    lt::Tensor loss =
        lt::nn::cross_entropy((*model)(lt::slice(data, 1, 0, seq)), lt::slice(data, 1, 1, seq + 1));
    loss.backward();
    opt->step();
    opt->zero_grad();
    lt::sync();
    return loss.item<float>();
  }
};

struct Shares {
  int64_t wall = 0, trace = 0, compile = 0, execute = 0;
  void add(int64_t w, int64_t t, int64_t c, int64_t e) {
    wall += w;
    trace += t;
    compile += c;
    execute += e;
  }
  void report(benchmark::State& state, int64_t tokens_per_step) const {
    const double n = static_cast<double>(state.iterations());
    state.counters["step_ms"] = wall / n / 1e6;
    state.counters["trace_share"] = static_cast<double>(trace) / wall;
    state.counters["compile_share"] = static_cast<double>(compile) / wall;
    state.counters["execute_share"] = static_cast<double>(execute) / wall;
    state.counters["other_share"] = static_cast<double>(wall - trace - compile - execute) / wall;
    state.counters["tokens_per_s"] = tokens_per_step * n / (wall / 1e9);
  }
};

int64_t timer(const char* name) {
  return lt::metrics::timer_ns(name);
}

// Runs one step, adding its wall, trace, compile and execute time to `shares`.
void timed_step(Trainer& trainer, Shares& shares) {
  const int64_t t0 = timer("TraceTime"), c0 = timer("CompileTime"), e0 = timer("ExecuteTime");
  const int64_t w0 = now_ns();
  benchmark::DoNotOptimize(trainer.step());
  const int64_t w1 = now_ns();
  shares.add(w1 - w0, timer("TraceTime") - t0, timer("CompileTime") - c0,
             timer("ExecuteTime") - e0);
}

void BM_TrainStep(benchmark::State& state) {
  Trainer trainer(state.range(0), state.range(1));
  trainer.step();  // compile
  const int64_t compiles = lt::metrics::counter("CompileCount");
  Shares shares;
  for (auto _ : state) timed_step(trainer, shares);
  if (lt::metrics::counter("CompileCount") != compiles)
    state.SkipWithError("a steady-state step compiled");
  shares.report(state, state.range(0) * state.range(1));
}
BENCHMARK(BM_TrainStep)
    ->Args({8, 64})
    ->Args({4, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_FirstTrainStep(benchmark::State& state) {
  Trainer trainer(state.range(0), state.range(1));
  Shares shares;
  for (auto _ : state) {
    state.PauseTiming();
    lazytrace::compiler::CompileCache::global().clear();
    state.ResumeTiming();
    timed_step(trainer, shares);
  }
  shares.report(state, state.range(0) * state.range(1));
}
BENCHMARK(BM_FirstTrainStep)->Args({8, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
