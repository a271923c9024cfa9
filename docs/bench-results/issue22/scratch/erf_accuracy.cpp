// math.h's erf_f32 against erf in double over every float (max ulps against the exact value,
// how many floats are above 1 ulp, and how many are 2 or more float ulps from the rounded
// value), beside libm's erff:
//   g++ -O2 -std=c++20 -mavx2 -mfma -ffp-contract=off -Isrc -Iinclude \
//       docs/bench-results/issue22/scratch/erf_accuracy.cpp -o /tmp/erf_accuracy
// (2026-12-05: max 1.047 ulps at 1.00268567, 8 floats above 1 ulp, 0 at 2 float ulps; libm
// 0.968.) erf_fit_small.py and erf_fit_large.py fitted its two polynomials.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include "backends/cpu/math.h"
using namespace lazytrace::cpu::math;

int main() {
  double max_ulp = 0, max_ulp_libm = 0, maxA = 0, maxB = 0;
  float worst = 0;
  uint64_t over1 = 0, n = 0, two = 0;
  for (uint64_t b = 0; b < 0x7f800000u; ++b) {
    float x;
    uint32_t u = static_cast<uint32_t>(b);
    std::memcpy(&x, &u, 4);
    const double ref = std::erf(static_cast<double>(x));
    const float got = erf_f32(x);
    const float ulpf = std::nextafter(static_cast<float>(std::fabs(ref)), INFINITY) -
                       static_cast<float>(std::fabs(ref));
    const double ulp = std::fabs(got - ref) / ulpf;
    if (ulp > max_ulp) {
      max_ulp = ulp;
      worst = x;
    }
    if (ulp > 1) ++over1;
    {
      const float w = static_cast<float>(ref);
      if (got != w) {
        const double d = std::fabs((double)got - (double)w) /
                         (std::nextafter(std::fabs(w), INFINITY) - std::fabs(w));
        if (d > 1.5) {
          ++two;
          if (two < 5) std::printf("2-ulp at %.9g\n", x);
        }
      }
    }
    if (std::fabs(x) < 1)
      maxA = std::max(maxA, ulp);
    else
      maxB = std::max(maxB, ulp);
    const double ul = std::fabs(std::erf(x) - ref) / ulpf;
    if (ul > max_ulp_libm) max_ulp_libm = ul;
    ++n;
  }
  std::printf(
      "max %.3f ulp at %.9g (erf %.9g), %llu of %llu above 1 ulp; libm erff max %.3f; |x|<1 %.3f, "
      "above %.3f\n",
      max_ulp, worst, std::erf((double)worst), (unsigned long long)over1, (unsigned long long)n,
      max_ulp_libm, maxA, maxB);
  std::printf("rounded metric: %llu floats 2+ ulps\n", (unsigned long long)two);
  for (float x : {0.0f, -0.0f, 1e-30f, 0.5f, 0.999f, 1.0f, 2.0f, 3.99f, 4.0f, 10.0f, INFINITY,
                  -INFINITY, NAN})
    std::printf("erf(%g) = %.9g (libm %.9g)\n", x, erf_f32(x), std::erf(x));
}
