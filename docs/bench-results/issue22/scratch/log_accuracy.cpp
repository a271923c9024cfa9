// math.h's log_f32 against log in double over every positive float (max ulps against the
// exact value, how many floats are above 1 ulp and how many 2 or more float ulps from the
// rounded value), and special values beside libm's logf:
//   g++ -O2 -std=c++20 -mavx2 -mfma -ffp-contract=off -Isrc -Iinclude \
//       docs/bench-results/issue22/scratch/log_accuracy.cpp -o /tmp/log_accuracy
// (2026-12-05: max 0.923 ulps at 0.706430793, none above 1 ulp.) log_fit.py fitted P.
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
  for (uint64_t b = 1; b < 0x7f800000u; ++b) {
    float x;
    uint32_t u = (uint32_t)b;
    std::memcpy(&x, &u, 4);
    const double ref = std::log((double)x);
    const float got = log_f32(x);
    const float w = (float)ref;
    const float ulpf = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
    const double ue = std::fabs(got - ref) / ulpf;
    if (ue > maxu) {
      maxu = ue;
      worst = x;
    }
    if (ue > 1) ++over1;
    if (got != w && std::fabs((double)got - (double)w) / ulpf > 1.5) {
      if (two++ < 5) std::printf("2 ulps at %a\n", x);
    }
  }
  std::printf("log: max %.3f ulp at %.9g, %llu above 1 ulp, %llu at 2+ float ulps\n", maxu, worst,
              (unsigned long long)over1, (unsigned long long)two);
  for (float x :
       {0.0f, -0.0f, -1.0f, 1.0f, 2.0f, 1e-45f, 1e-40f, 3.4e38f, INFINITY, -INFINITY, NAN})
    std::printf("log(%g) = %.9g (libm %.9g)\n", x, log_f32(x), std::log(x));
}
