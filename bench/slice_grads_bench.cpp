// torch_xla's per-step stacking pattern: a for loop over slices of stacked weights (one
// select per layer), then backward, with the slice_grads pass on and off.
//
//   BM_SliceLoopStep/L/H/I/on  L layers h = h + relu(h W1[l]) W2[l] (W1 [L, H, I], W2
//                              [L, I, H]; with I = 0 one weight, h = h + h W[l]) over 16
//                              tokens: forward, backward, sync of the gradients (a cached
//                              graph). Counters: peak_over_weights (the most bytes live at
//                              once, weights, gradients and the compiled step's scratch
//                              included, over the weights' bytes), peak_mb, weights_mb,
//                              first_step_ms (tracing and compiling included).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include <lazytrace/lazytrace.h>

namespace {

void BM_SliceLoopStep(benchmark::State& state) {
  const int layers = static_cast<int>(state.range(0));
  const int64_t hidden = state.range(1), inter = state.range(2);
  const bool on = state.range(3) != 0;
  const auto before = lt::debug::set_disabled_passes(on ? std::vector<std::string>{}
                                                        : std::vector<std::string>{"slice_grads"});
  lt::clear_caches();  // each run compiles: its first step and its memory are its own
  const int64_t baseline = lt::metrics::memory_bytes();
  lt::metrics::reset_peak_memory();
  lt::manual_seed(0);
  std::vector<lt::Tensor> weights;
  if (inter == 0) {
    weights.push_back(lt::randn({layers, hidden, hidden}) * (0.5f / hidden));
  } else {
    weights.push_back(lt::randn({layers, hidden, inter}) * (1.0f / hidden));
    weights.push_back(lt::randn({layers, inter, hidden}) * (1.0f / inter));
  }
  for (lt::Tensor& w : weights) w.requires_grad_();
  lt::Tensor x = lt::randn({16, hidden});
  lt::sync(weights);
  lt::sync({x});
  int64_t weight_bytes = 0;
  for (const lt::Tensor& w : weights) weight_bytes += w.numel() * 4;
  auto step = [&] {
    lt::Tensor h = x;
    for (int l = 0; l < layers; ++l) {
      if (inter == 0)
        h = h + lt::matmul(h, lt::select(weights[0], 0, l));
      else
        h = h + lt::matmul(lt::relu(lt::matmul(h, lt::select(weights[0], 0, l))),
                           lt::select(weights[1], 0, l));
    }
    lt::sum(h).backward();
    std::vector<lt::Tensor> grads;
    for (lt::Tensor& w : weights) grads.push_back(w.grad());
    lt::sync(grads);
    for (lt::Tensor& w : weights) w.set_grad(lt::Tensor());
  };
  const int64_t t0 = lt::metrics::now_ns();
  step();  // the first step compiles; its peak counts, its time is reported apart
  state.counters["first_step_ms"] = static_cast<double>(lt::metrics::now_ns() - t0) / 1e6;
  for (auto _ : state) step();
  const int64_t peak = lt::metrics::peak_memory_bytes() - baseline;
  lt::debug::set_disabled_passes(before);
  lt::clear_caches();
  state.counters["peak_over_weights"] =
      static_cast<double>(peak) / static_cast<double>(weight_bytes);
  state.counters["peak_mb"] = static_cast<double>(peak) / (1 << 20);
  state.counters["weights_mb"] = static_cast<double>(weight_bytes) / (1 << 20);
}

// The two cases: 200 layers of one 128 x 128 weight (12.5 MiB), and 50 layers of an
// MLP at hidden 256 x intermediate 2048 (200 MiB); the pass off only where it fits in memory.
BENCHMARK(BM_SliceLoopStep)
    ->ArgNames({"layers", "hidden", "inter", "on"})
    ->Args({200, 128, 0, 1})
    ->Args({200, 128, 0, 0})
    ->Args({50, 256, 2048, 1})
    ->Args({10, 256, 2048, 1})
    ->Args({10, 256, 2048, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
