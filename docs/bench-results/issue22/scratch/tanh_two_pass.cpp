#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "backends/cpu/math.h"
#include "tile_cycles.h"
namespace m = lazytrace::cpu::math;
using m::fma;
using m::select;
__attribute__((noinline)) void tanh_one(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::tanh_f32(a[j]);
}
static float tmp[4096];
// the same tanh in two loops: e^2|x| + 1 over the tile, then the division and blends
__attribute__((noinline)) void tanh_two(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) tmp[j] = m::tanh_denominator(a[j]);
  for (long j = 0; j < n; ++j) d[j] = m::tanh_from(a[j], tmp[j]);
}
__attribute__((noinline)) void sig_one(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::sigmoid(a[j]);
}
__attribute__((noinline)) void sig_two(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) tmp[j] = 1.0f + m::exp_clamped(-a[j]);
  for (long j = 0; j < n; ++j) d[j] = select(-a[j] > m::kExpHi, 0.0f, 1.0f / tmp[j]);
}
int main() {
  const long n = 1024;
  std::vector<float> a = normal_tile(n), d(n), e(n);
  a[3] = NAN;
  a[5] = 100;
  a[6] = -100;
  a[7] = 0.f;
  a[8] = -0.f;
  for (int r = 0; r < 3; ++r)
    printf("tanh one loop %.1f two %.1f | sigmoid one loop %.1f two %.1f cycles/16\n",
           cycles_per_16(tanh_one, d.data(), a.data(), n),
           cycles_per_16(tanh_two, e.data(), a.data(), n),
           cycles_per_16(sig_one, d.data(), a.data(), n),
           cycles_per_16(sig_two, e.data(), a.data(), n));
  tanh_one(d.data(), a.data(), n);
  tanh_two(e.data(), a.data(), n);
  printf("tanh same bits: %d\n", memcmp(d.data(), e.data(), n * 4) == 0);
  sig_one(d.data(), a.data(), n);
  sig_two(e.data(), a.data(), n);
  printf("sig same bits: %d\n", memcmp(d.data(), e.data(), n * 4) == 0);
}
