// scan over per-layer weights kept stacked, against the unrolled loop over the same weights:
// MLP blocks h = h + relu(h W1[l]) W2[l] (hidden 256, intermediate 2048) over 16 tokens,
// forward, backward (loss sum(h * h)), and a sync of the gradients: a cached graph.
//
//   BM_MlpStep/L/mode   mode 0: a C++ for loop over L pairs of weight tensors (unrolled in
//                       the graph); 1: lt::scan over W1 [L, H, I], W2 [L, I, H] (Remat::save)
//     (time)            wall time of a steady-state step
//     first_step_ms     the first step (tracing and compiling included)
//   BM_MlpPaired/L      both modes in one process, in alternating bursts of steps (as many
//                       as take about 50 ms, at least one, after an untimed step; the first
//                       mode of a pair alternates too), so that the VM's drift in speed falls
//                       on both alike; registered only when --benchmark_filter names it
//                       (--benchmark_filter=Paired --benchmark_min_time=4: 60 to 90 pairs at
//                       10 layers, about 30 at 50, 5 to 7 at 200)
//     (time)            wall time of a pair of bursts and their untimed steps
//     scan_over_loop    the median over pairs of the scan's step time against the loop's,
//                       each pair's bursts side by side
//     ratio_lo, _hi     the smallest and largest pair's ratio
//
// Both modes start from the same weights and inputs; the program checks once per layer
// count that their gradients agree (and fails the benchmark otherwise).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <lazytrace/lazytrace.h>

#include "paired.h"

namespace {

constexpr int64_t kHidden = 256, kInter = 2048, kTokens = 16;

struct Mlp {
  lt::Tensor x, w1, w2;              // stacked: [L, H, I], [L, I, H]
  std::vector<lt::Tensor> w1s, w2s;  // the same values, one tensor per layer
  bool stacked;

  Mlp(int64_t layers, bool stacked_) : stacked(stacked_) {
    lt::manual_seed(0);
    x = lt::randn({kTokens, kHidden});
    w1 = lt::randn({layers, kHidden, kInter}) * (1.0f / std::sqrt(float(kHidden)));
    w2 = lt::randn({layers, kInter, kHidden}) * (0.5f / std::sqrt(float(kInter)));
    lt::sync({x, w1, w2});
    if (!stacked) {
      for (int64_t l = 0; l < layers; ++l) {
        w1s.push_back(lt::clone(lt::select(w1, 0, l)));
        w2s.push_back(lt::clone(lt::select(w2, 0, l)));
      }
      lt::sync(w1s);
      lt::sync(w2s);
      for (auto& w : w1s) w.requires_grad_();
      for (auto& w : w2s) w.requires_grad_();
      w1 = w2 = lt::Tensor();
    } else {
      w1.requires_grad_();
      w2.requires_grad_();
    }
  }

  static lt::Tensor block(const lt::Tensor& h, const lt::Tensor& a, const lt::Tensor& b) {
    return h + lt::matmul(lt::relu(lt::matmul(h, a)), b);
  }

  // One step; returns the gradients (stacked: [W1 grad, W2 grad]; else per layer, W1s then
  // W2s), synced.
  std::vector<lt::Tensor> step() {
    lt::Tensor h = x;
    if (stacked) {
      h = lt::scan(
              [](const lt::Tensor& c, const std::pair<lt::Tensor, lt::Tensor>& w) {
                return std::pair{block(c, w.first, w.second), lt::Tree()};
              },
              h, std::pair{w1, w2})
              .first;
    } else {
      for (size_t l = 0; l < w1s.size(); ++l) h = block(h, w1s[l], w2s[l]);
    }
    lt::sum(h * h).backward();
    std::vector<lt::Tensor> grads;
    auto take = [&](lt::Tensor& w) {
      grads.push_back(w.grad());
      w.set_grad(lt::Tensor());
    };
    if (stacked) {
      take(w1);
      take(w2);
    } else {
      for (auto& w : w1s) take(w);
      for (auto& w : w2s) take(w);
    }
    lt::sync(grads);
    return grads;
  }
};

// The gradients of a step of each mode, checked against each other once per depth, layer by
// layer: the norm of their difference against the norm of the loop's, at most 10%. Not entry
// by entry, nor tighter: the modes may round differently (a product on another kernel,
// another order of terms), and the difference grows through the backward's layers. With the
// passes on they agree bit for bit; with factored_grads off, a layer's differed by 3e-6 at
// 200 layers in three processes and by 1.7e-2 (3.5e-4 at 50 layers) in a fourth, which had
// kept other kernels (2026-12-07); float32 itself is up to 4.8e-3 from float64 there (the
// scan's gradients against a float64 NumPy loop). A wrong layer or a lost term differs by far
// more. A NaN never agrees.
bool gradients_agree(int64_t layers) {
  static std::map<int64_t, bool> checked;
  if (auto it = checked.find(layers); it != checked.end()) return it->second;
  std::vector<lt::Tensor> s = Mlp(layers, true).step(), u = Mlp(layers, false).step();
  double worst = 0;
  for (int w = 0; w < 2; ++w) {
    const std::vector<float> stacked = s[static_cast<size_t>(w)].to_vector<float>();
    const size_t per = stacked.size() / static_cast<size_t>(layers);
    for (int64_t l = 0; l < layers; ++l) {
      const std::vector<float> loop = u[static_cast<size_t>(w * layers + l)].to_vector<float>();
      double diff = 0, norm = 0;
      for (size_t i = 0; i < per; ++i) {
        const double a = stacked[static_cast<size_t>(l) * per + i], b = loop[i];
        diff += (a - b) * (a - b);
        norm += b * b;
      }
      const double r = std::sqrt(diff / norm);
      worst = std::isnan(r) ? std::numeric_limits<double>::infinity() : std::max(worst, r);
    }
  }
  const bool agree = worst < 0.1;  // a NaN layer made it infinite
  if (!agree)
    std::fprintf(stderr,
                 "%lld layers: a layer's gradient differs from the unrolled loop's by %g (the "
                 "norm of the difference against the loop's)\n",
                 static_cast<long long>(layers), worst);
  return checked[layers] = agree;
}

// Whether the gradients agree at the benchmark's depth; a skipped benchmark where not.
bool agree_or_skip(benchmark::State& state, int64_t layers) {
  if (gradients_agree(layers)) return true;
  state.SkipWithError("scan's gradients differ from the unrolled loop's");
  return false;
}

void BM_MlpStep(benchmark::State& state) {
  const int64_t layers = state.range(0);
  if (!agree_or_skip(state, layers)) return;
  Mlp mlp(layers, state.range(1) == 1);
  const int64_t t0 = lt::metrics::now_ns();
  mlp.step();
  state.counters["first_step_ms"] = double(lt::metrics::now_ns() - t0) / 1e6;
  mlp.step();
  for (auto _ : state) mlp.step();
}
BENCHMARK(BM_MlpStep)
    ->ArgNames({"layers", "scan"})
    ->Args({10, 0})  // each depth's two modes side by side
    ->Args({10, 1})
    ->Args({50, 0})
    ->Args({50, 1})
    ->Args({200, 0})
    ->Args({200, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_MlpPaired(benchmark::State& state) {
  const int64_t layers = state.range(0);
  if (!agree_or_skip(state, layers)) return;
  Mlp modes[2] = {Mlp(layers, false), Mlp(layers, true)};
  // the loops' timed choices (read-ahead, streaming stores) decide over their first runs
  for (Mlp& m : modes)
    for (int s = 0; s < 10; ++s) m.step();
  const int64_t t0 = lt::metrics::now_ns();
  modes[0].step();
  const double step_ns = static_cast<double>(lt::metrics::now_ns() - t0);
  const int burst = std::max(1, static_cast<int>(50e6 / step_ns));
  std::vector<double> ratios;
  for (auto _ : state) {
    double ns[2] = {};
    for (int i = 0; i < 2; ++i) {
      const int mode = (i + static_cast<int>(ratios.size())) % 2;
      modes[mode].step();  // untimed: the first step after the other mode's finds cold caches
      const int64_t b0 = lt::metrics::now_ns();
      for (int s = 0; s < burst; ++s) modes[mode].step();
      ns[mode] = static_cast<double>(lt::metrics::now_ns() - b0);
    }
    ratios.push_back(ns[1] / ns[0]);
  }
  state.counters["scan_over_loop"] = bench::median(ratios);
  state.counters["ratio_lo"] = *std::min_element(ratios.begin(), ratios.end());
  state.counters["ratio_hi"] = *std::max_element(ratios.begin(), ratios.end());
  state.counters["pairs"] = static_cast<double>(ratios.size());
}
}  // namespace

// The kernels the products ran on, and the loops' timed choices, after the rows (stderr).
int main(int argc, char** argv) {
  if (bench::filter_names(argc, argv, "Paired"))
    benchmark::RegisterBenchmark("BM_MlpPaired", BM_MlpPaired)
        ->ArgName("layers")
        ->Arg(10)
        ->Arg(50)
        ->Arg(200)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::fprintf(stderr, "lazytrace's kernel choices:\n%s", lt::debug::kernel_choices().c_str());
  for (const std::string& name : lt::metrics::counter_names())
    if (name.find("Choice[") != std::string::npos)
      std::fprintf(stderr, "%s %lld\n", name.c_str(),
                   static_cast<long long>(lt::metrics::counter(name)));
  return 0;
}
