#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
namespace oldm {
#include "math_old_body.h"
}
#undef LT_MATH_INLINE
#include "backends/cpu/math.h"
#include "tile_cycles.h"
namespace m = lazytrace::cpu::math;
__attribute__((noinline)) void sig_old(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = 1.0f / (1.0f + oldm::exp_f32(-a[j]));
}
__attribute__((noinline)) void sig_new(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::sigmoid(a[j]);
}
__attribute__((noinline)) void tanh_old(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = oldm::tanh_f32(a[j]);
}
__attribute__((noinline)) void tanh_new(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::tanh_f32(a[j]);
}
int main() {
  const long n = 1024;
  std::vector<float> a = normal_tile(n), d(n), e(n);
  for (int r = 0; r < 3; ++r)
    printf("sigmoid old %.1f new %.1f | tanh old %.1f new %.1f cycles/16\n",
           cycles_per_16(sig_old, d.data(), a.data(), n),
           cycles_per_16(sig_new, e.data(), a.data(), n),
           cycles_per_16(tanh_old, d.data(), a.data(), n),
           cycles_per_16(tanh_new, e.data(), a.data(), n));
}
