// exp, tanh, sigmoid, silu, erf, gelu and log through the fused steps' native code (jit_fused)
// against math.h's scalar formulas, over all 2^32 floats, bit for bit (NaN matching any NaN).
#include <lazytrace/lazytrace.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cpu/math.h"

namespace m = lazytrace::cpu::math;
using K = lazytrace::ir::OpKind;

int main() {
  const int64_t chunk = 1 << 22;
  std::vector<float> xs(chunk);
  constexpr int kOps = 7;
  const K ops[kOps] = {K::Exp, K::Tanh, K::Sigmoid, K::Silu, K::Erf, K::Gelu, K::Log};
  const char* names[kOps] = {"exp", "tanh", "sigmoid", "silu", "erf", "gelu", "log"};
  int64_t bad[kOps] = {};
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += chunk) {
    for (int64_t i = 0; i < chunk; ++i) {
      const uint32_t b = static_cast<uint32_t>(base + i);
      std::memcpy(&xs[i], &b, 4);
    }
    lt::Tensor x = lt::tensor(xs, {chunk});
    lt::Tensor ys[kOps] = {lt::exp(x), lt::tanh(x), lt::sigmoid(x), lt::silu(x),
                           lt::erf(x), lt::gelu(x), lt::log(x)};
    for (int o = 0; o < kOps; ++o) {
      const std::vector<float> got = ys[o].to_vector<float>();
      for (int64_t i = 0; i < chunk; ++i) {
        const float want = m::unary(ops[o], xs[i]);
        if (std::isnan(want) && std::isnan(got[i])) continue;
        uint32_t a, w;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&w, &want, 4);
        if (a != w && bad[o]++ < 3)
          std::printf("%s(%a): %a against %a\n", names[o], xs[i], got[i], want);
      }
    }
  }
  for (int o = 0; o < kOps; ++o)
    std::printf("%s: %lld floats differ\n", names[o], static_cast<long long>(bad[o]));
  std::printf("JitFusedRuns %lld\n", static_cast<long long>(lt::metrics::counter("JitFusedRuns")));
}
