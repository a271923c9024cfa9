// exp, tanh and sigmoid with exp's old polynomial (Cephes' degree 7, in the form
// r + r^2 P(r)) against the new one (degree 6, math.h's kExpP), and tanh's range reduction
// by ln2 in two parts against one, all with n capped at 127 as math.h did before 7e5c23a:
// worst ulps against double over every float of each range. The "before" figures of
// exp_tanh_sigmoid_accuracy.cpp's header (about 3 minutes):
//   g++ -std=c++20 -O3 -march=native -ffp-contract=off -Isrc -Iinclude \
//       docs/bench-results/issue22/scratch/exp_degree_compare.cpp -o /tmp/edc && /tmp/edc
// 2026-12-05: exp degree 7 [-87.33, 80] 1.010 ulps (22 floats above 1), [80, 88.72] 5.276
// (12,149 above 1); degree 6 there 1.014 (10) and 97.948 (36,083), which is why n now
// reaches 128; tanh two-part degree 7 1.330 (32,083), one-part degree 6 1.322 (32,446);
// sigmoid 2.481 with either.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "backends/cpu/math.h"
#include "ulps_sweep.h"
namespace m = lazytrace::cpu::math;
// 2^n by its exponent bits, n at most 127 (math.h before 7e5c23a)
static float pow2_of(float fn) {
  const uint32_t bits = static_cast<uint32_t>(static_cast<int>(fn) + 127) << 23;
  float s;
  std::memcpy(&s, &bits, sizeof s);
  return s;
}
static float P7[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
static float P6[] = {0.0013814551057294011f, 0.00836869329214096f, 0.04166838526725769f,
                     0.1666652113199234f, 0.4999999403953552f};
template <int N>
inline float expm1_red(float xc, float fn, const float* P, bool one_part) {
  float r;
  if (one_part)
    r = std::fma(fn, -0.693147182f, xc);
  else {
    r = std::fma(fn, -0.693359375f, xc);
    r = std::fma(fn, 2.12194440e-4f, r);
  }
  float p = P[0];
  for (int i = 1; i < N; ++i) p = std::fma(p, r, P[i]);
  return std::fma(p, r * r, r);
}
template <int N>
inline float expf_(float x, const float* P) {
  const float xc = x > m::kExpHi ? m::kExpHi : x < m::kExpLo ? m::kExpLo : x;
  float fn = m::exp_n(xc);
  fn = fn > 127.f ? 127.f : fn;
  return (expm1_red<N>(xc, fn, P, false) + 1.0f) * pow2_of(fn);
}
template <int N>
inline float tanhf_(float x, const float* P, bool one) {
  const float ax = std::fabs(x);
  const float e = std::fmin(2 * ax, 20.f);
  const float fn = m::exp_n(e);
  const float den = (expm1_red<N>(e, fn, P, one) + 1.0f) * pow2_of(fn) + 1.0f;
  return m::tanh_from(x, den);
}
template <int N>
inline float sigm_(float x, const float* P) {
  return -x > m::kExpHi ? 0.f : 1.f / (1.f + expf_<N>(-x, P));
}
int main() {
  auto de = [](float x) { return std::exp((double)x); };
  auto dt = [](float x) { return std::tanh((double)x); };
  auto ds = [](float x) { return 1 / (1 + std::exp(-(double)x)); };
  for (auto [lo, hi] : {std::pair{-87.33f, 80.f}, std::pair{80.f, 88.72f}}) {
    run(
        "exp degree 7", lo, hi, [](float x) { return expf_<6>(x, P7); }, de);
    run(
        "exp degree 6", lo, hi, [](float x) { return expf_<5>(x, P6); }, de);
  }
  run(
      "tanh deg 7 two-part", 0.f, 10.f, [](float x) { return tanhf_<6>(x, P7, false); }, dt);
  run(
      "tanh deg 6 one-part", 0.f, 10.f, [](float x) { return tanhf_<5>(x, P6, true); }, dt);
  run(
      "tanh deg 7 one-part", 0.f, 10.f, [](float x) { return tanhf_<6>(x, P7, true); }, dt);
  run(
      "sigmoid deg 7", -80.f, 80.f, [](float x) { return sigm_<6>(x, P7); }, ds);
  run(
      "sigmoid deg 6", -80.f, 80.f, [](float x) { return sigm_<5>(x, P6); }, ds);
}
