// Cycles per 16 floats of fused steps through the native code (jit_fused), one thread,
// 256K floats (in L2), best of 7 rounds of 50 synced calls; argv[1]: the clock in GHz.
#include <lazytrace/lazytrace.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::stod(argv[1]) : 3.52;
  const int64_t n = 1 << 18;
  lt::manual_seed(0);
  lt::Tensor x = lt::randn({n});
  lt::sync({x});
  struct Case {
    const char* name;
    std::function<lt::Tensor(const lt::Tensor&)> f;
  };
  std::vector<Case> cases = {
      {"x * 1.5 + 0.25", [](const lt::Tensor& x) { return x * 1.5f + 0.25f; }},
      {"tanh", [](const lt::Tensor& x) { return lt::tanh(x * 1.5f); }},
      {"sigmoid", [](const lt::Tensor& x) { return lt::sigmoid(x * 1.5f); }},
      {"exp", [](const lt::Tensor& x) { return lt::exp(x * 1.5f); }},
      {"relu", [](const lt::Tensor& x) { return lt::relu(x * 1.5f); }},
      {"gelu", [](const lt::Tensor& x) { return lt::gelu(x * 1.5f); }},
      {"silu", [](const lt::Tensor& x) { return lt::silu(x * 1.5f); }},
      {"chain",
       [](const lt::Tensor& x) {
         lt::Tensor v = lt::tanh(x * 1.5f + 0.25f);
         v = lt::sigmoid(v * 2.0f - 0.5f);
         return lt::relu(v * x);
       }},
  };
  for (auto& c : cases) {
    double best = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 50; ++i) {
        lt::Tensor y = c.f(x);
        lt::sync({y});
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 50;
      best = std::min(best, s);
    }
    std::printf("%-16s %7.1f us  %6.1f cycles per 16 floats\n", c.name, best * 1e6,
                best * ghz * 1e9 / (n / 16));
  }
}
