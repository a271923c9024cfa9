// The spec's scan_layers benchmark: a training step (forward, backward, AdamW) of a decoder
// with hidden 256, 4 heads with 2 kv heads, intermediate 2048, vocab 256, on batch 2 x
// sequence 32 of GPL-3 bytes, with the layers run by a for loop, by scan_layers, and by
// scan_layers with Remat::recompute, at 10, 50, 100 and 200 layers.
//
//   BM_DecoderStep/L/mode   mode 0: for loop; 1: scan_layers over weights kept stacked
//                           (DecoderConfig::stacked_layers); 2: the same with
//                           Remat::recompute; 3: scan_layers over per-layer modules (their
//                           weights stacked in every step, torch_xla's way)
//     compile_ms   compiling the step's graph from scratch (graph and body caches cleared):
//                  the first step's CompileTime
//     first_trace_ms  the first step's TraceTime
//     trace_ms     TraceTime of a steady-state step (the layer is traced every step:
//                  is_layer_pure is off)
//     step_ms      wall time of a steady-state step (a compile-cache hit)
//     peak_mb      the most bytes live at once during steady steps (weights, AdamW state,
//                  gradients, outputs, arenas)
//   BM_ActivationMemory/L/mode  forward and backward only (gradients are the graph's
//                  outputs): act_mb is that graph's arena, every intermediate value (the
//                  activations saved for backward), planned by liveness
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>

#include <lazytrace/lazytrace.h>

#include "backends/cpu/program.h"
#include "compiler/compile_cache.h"
#include "gpl_text.h"
#include "runtime/buffer.h"

namespace {

namespace nn = lt::nn;
using lt::metrics::now_ns;

constexpr int64_t kBatch = 2, kSeq = 32;

struct Trainer {
  std::shared_ptr<nn::DecoderLM> model;
  std::unique_ptr<lt::optim::AdamW> opt;
  std::mt19937_64 rng{1};

  Trainer(int64_t layers, int mode) {
    lt::manual_seed(0);
    model = std::make_shared<nn::DecoderLM>(
        nn::DecoderConfig{.vocab = 256,
                          .hidden = 256,
                          .intermediate = 2048,
                          .heads = 4,
                          .kv_heads = 2,
                          .layers = layers,
                          .max_seq = kSeq,
                          .stacked_layers = mode == 1 || mode == 2});
    model->layers_mode = mode == 0 ? nn::LayersMode::loop : nn::LayersMode::scan;
    model->scan_options.remat = mode == 2 ? lt::Remat::recompute : lt::Remat::save;
    opt = std::make_unique<lt::optim::AdamW>(model->parameters(), lt::optim::AdamWOptions{});
  }

  // Forward and backward on a batch; returns the loss.
  lt::Tensor forward_backward() {
    std::vector<int64_t> tokens(static_cast<size_t>(kBatch * (kSeq + 1)));
    for (int64_t b = 0; b < kBatch; ++b) {
      const size_t start = rng() % (gpl_text().size() - kSeq - 1);
      for (int64_t i = 0; i <= kSeq; ++i)
        tokens[b * (kSeq + 1) + i] = static_cast<unsigned char>(gpl_text()[start + i]);
    }
    lt::Tensor data = lt::tensor(tokens, {kBatch, kSeq + 1});
    lt::Tensor loss =
        nn::cross_entropy((*model)(lt::slice(data, 1, 0, kSeq)), lt::slice(data, 1, 1, kSeq + 1));
    loss.backward();
    return loss;
  }

  float step() {
    lt::Tensor loss = forward_backward();
    opt->step();
    opt->zero_grad();
    lt::sync();
    return loss.item<float>();
  }
};

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}
int64_t timer(const char* name) {
  return lt::metrics::timer_ns(name);
}

void BM_DecoderStep(benchmark::State& state) {
  Trainer trainer(state.range(0), static_cast<int>(state.range(1)));
  lt::sync();  // the initial weights
  // the first step, compiled from scratch
  lazytrace::compiler::CompileCache::global().clear();
  lazytrace::cpu::clear_body_programs();
  const int64_t t0 = timer("TraceTime"), c0 = timer("CompileTime");
  trainer.step();
  state.counters["first_trace_ms"] = ms(timer("TraceTime") - t0);
  state.counters["compile_ms"] = ms(timer("CompileTime") - c0);

  const int64_t compiles = lt::metrics::counter("CompileCount");
  lazytrace::runtime::Buffer::reset_peak();
  int64_t wall = 0, trace = 0;
  for (auto _ : state) {
    const int64_t tt = timer("TraceTime"), w0 = now_ns();
    benchmark::DoNotOptimize(trainer.step());
    wall += now_ns() - w0;
    trace += timer("TraceTime") - tt;
  }
  if (lt::metrics::counter("CompileCount") != compiles)
    state.SkipWithError("a steady-state step compiled");
  const double n = static_cast<double>(state.iterations());
  state.counters["step_ms"] = ms(wall) / n;
  state.counters["trace_ms"] = ms(trace) / n;
  state.counters["peak_mb"] = static_cast<double>(lazytrace::runtime::Buffer::peak_bytes()) / 1e6;
}
BENCHMARK(BM_DecoderStep)
    ->ArgsProduct({{10, 50, 100, 200}, {0, 1, 2, 3}})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ActivationMemory(benchmark::State& state) {
  Trainer trainer(state.range(0), static_cast<int>(state.range(1)));
  lt::sync();
  lazytrace::runtime::Buffer::reset_peak();
  for (auto _ : state) {
    lazytrace::compiler::CompileCache::global().clear();
    lt::Tensor loss = trainer.forward_backward();
    std::vector<lt::Tensor> out{loss};
    for (const lt::Tensor& p : trainer.model->parameters()) out.push_back(p.grad());
    lt::sync(out);
    trainer.opt->zero_grad();
  }
  state.counters["act_mb"] =
      static_cast<double>(lazytrace::compiler::CompileCache::global().arena_bytes()) / 1e6;
  state.counters["peak_mb"] = static_cast<double>(lazytrace::runtime::Buffer::peak_bytes()) / 1e6;
}
BENCHMARK(BM_ActivationMemory)
    ->ArgsProduct({{50, 100}, {0, 1, 2}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
