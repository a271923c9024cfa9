// math.h's exp, tanh and sigmoid against the same functions in double over every float of a
// range: worst error in ulps of the rounded value, and how many floats are above 1 ulp.
//   g++ -std=c++20 -O3 -march=native -ffp-contract=off -Isrc -Iinclude \
//       docs/bench-results/issue22/scratch/exp_tanh_sigmoid_accuracy.cpp -lpthread -o /tmp/acc &&
//       /tmp/acc
// 2026-12-05 (about 1 minute), with exp's degree-6 polynomial and tanh's one-part ln2 (7e5c23a):
// ("before": exp_degree_compare.cpp)
//   exp [80, 88.72]: 0.979 ulps at 80.7923355, none above 1 (5.276 before, 12,149 above 1)
//   exp [-87.33, 80]: 1.014 ulps at 37.7786407, 10 of 2.24e9 above 1 (1.010, 22 before)
//   tanh [0, 10]: 1.322 ulps at 0.629926145, 32,446 above 1 (1.330, 32,083 before)
//   sigmoid [-80, 0]: 2.481 ulps at -16.635704; [0, 80]: 1.498 ulps (the same before)
#include <cmath>
#include <cstdio>
#include <thread>
#include "backends/cpu/math.h"
#include "ulps_sweep.h"
namespace m = lazytrace::cpu::math;
int main() {
  auto de = [](float x) { return std::exp((double)x); };
  auto dt = [](float x) { return std::tanh((double)x); };
  auto ds = [](float x) { return 1 / (1 + std::exp(-(double)x)); };
  std::thread a([&] {
    run("exp", -87.33f, 80.f, m::exp_f32, de);
    run(
        "sigmoid", -80.f, 0.f, [](float x) { return m::sigmoid(x); }, ds);
  });
  run("exp", 80.f, 88.72f, m::exp_f32, de);
  run("tanh", 0.f, 10.f, m::tanh_f32, dt);
  run(
      "sigmoid", 0.f, 80.f, [](float x) { return m::sigmoid(x); }, ds);
  a.join();
}
