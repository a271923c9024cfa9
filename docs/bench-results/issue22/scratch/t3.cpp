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
template <class F>
double cyc(F f, float* d, const float* a, long n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200000; ++i) {
    f(d, a, n);
    asm volatile("" ::: "memory");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200000 / n *
         4e9 * 16;
}
int main() {
  const long n = 1024;
  std::vector<float> a(n), d(n), e(n);
  std::mt19937 g(1);
  std::normal_distribution<float> N(0, 2);
  for (auto& v : a) v = N(g);
  for (int r = 0; r < 3; ++r)
    printf("sigmoid old %.1f new %.1f | tanh old %.1f new %.1f cycles/16\n",
           cyc(sig_old, d.data(), a.data(), n), cyc(sig_new, e.data(), a.data(), n),
           cyc(tanh_old, d.data(), a.data(), n), cyc(tanh_new, e.data(), a.data(), n));
}
