// math.h's log1p_f32 against log1p in double over every float above -1 (max ulps against the
// exact value, how many floats are above 1 ulp and how many 2 or more float ulps from the
// rounded value), and special values beside libm's log1pf:
//   g++ -O2 -std=c++20 -mavx2 -mfma -ffp-contract=off -Isrc -Iinclude \
//       docs/bench-results/issue22/scratch/log1p_accuracy.cpp -o /tmp/log1p_accuracy
// (2026-12-05: max 1.437 ulps at -8.94069672e-08, 6,108,344 floats above 1 ulp, none at 2.)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include "backends/cpu/math.h"
using namespace lazytrace::cpu::math;
int main() {
  double maxu = 0;
  float worst = 0;
  uint64_t two = 0, over1 = 0;
  for (uint64_t b = 0; b < 0x100000000ull; ++b) {
    float x;
    uint32_t u = (uint32_t)b;
    std::memcpy(&x, &u, 4);
    if (!(x > -1.0f) || std::isinf(x) || std::isnan(x)) continue;
    const double ref = std::log1p((double)x);
    const float got = log1p_f32(x);
    const float w = (float)ref;
    if (w == 0) {
      if (got != 0) {
        if (two++ < 5) std::printf("zero mismatch %a\n", x);
      }
      continue;
    }
    const float ulpf = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
    const double ue = std::fabs(got - ref) / ulpf;
    if (ue > maxu) {
      maxu = ue;
      worst = x;
    }
    if (ue > 1) ++over1;
    if (got != w && std::fabs((double)got - (double)w) / ulpf > 1.5) {
      if (two++ < 5) std::printf("2 ulps at %a: %a vs %a\n", x, got, w);
    }
  }
  std::printf("log1p: max %.3f ulp at %.9g, %llu above 1 ulp, %llu at 2+ float ulps\n", maxu, worst,
              (unsigned long long)over1, (unsigned long long)two);
  for (float x :
       {0.0f, -0.0f, -1.0f, -2.0f, 1e-30f, -0.5f, 1e30f, 3.4e38f, INFINITY, -INFINITY, NAN})
    std::printf("log1p(%g) = %.9g (libm %.9g)\n", x, log1p_f32(x), std::log1p(x));
}
