#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "backends/cpu/math.h"
namespace m = lazytrace::cpu::math;
using m::select; using m::fma;
__attribute__((noinline)) void tanh_one(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::tanh_f32(a[j]);
}
static float tmp[4096];
__attribute__((noinline)) void tanh_two(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) {
    const float x = a[j];
    const float ax = x < 0 ? -x : x;
    const float ax2 = 2.0f * ax;
    const float e = select(ax2 > 20.0f, 20.0f, ax2);
    tmp[j] = m::exp_from_n(e, m::exp_n(e)) + 1.0f;
  }
  for (long j = 0; j < n; ++j) {
    const float x = a[j];
    const float ax = x < 0 ? -x : x;
    const float z = x * x;
    float small = -5.70498872745e-3f;
    small = fma(small, z, 2.06390887954e-2f);
    small = fma(small, z, -5.37397155531e-2f);
    small = fma(small, z, 1.33314422036e-1f);
    small = fma(small, z, -3.33332819422e-1f);
    small = fma(small * z, x, x);
    float big = 1.0f - 2.0f / tmp[j];
    big = select(x < 0, -big, big);
    d[j] = select(x != x, x, select(ax < 0.625f, small, big));
  }
}
__attribute__((noinline)) void tanh_three(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) {
    const float x = a[j];
    const float ax = x < 0 ? -x : x;
    const float ax2 = 2.0f * ax;
    const float e = select(ax2 > 20.0f, 20.0f, ax2);
    tmp[j] = m::exp_from_n(e, m::exp_n(e)) + 1.0f;
  }
  for (long j = 0; j < n; ++j) tmp[j] = 2.0f / tmp[j];
  for (long j = 0; j < n; ++j) {
    const float x = a[j];
    const float ax = x < 0 ? -x : x;
    const float z = x * x;
    float small = -5.70498872745e-3f;
    small = fma(small, z, 2.06390887954e-2f);
    small = fma(small, z, -5.37397155531e-2f);
    small = fma(small, z, 1.33314422036e-1f);
    small = fma(small, z, -3.33332819422e-1f);
    small = fma(small * z, x, x);
    float big = 1.0f - tmp[j];
    big = select(x < 0, -big, big);
    d[j] = select(x != x, x, select(ax < 0.625f, small, big));
  }
}
__attribute__((noinline)) void sig_one(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::sigmoid(a[j]);
}
__attribute__((noinline)) void sig_two(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) tmp[j] = 1.0f + m::exp_clamped(-a[j]);
  for (long j = 0; j < n; ++j) d[j] = select(-a[j] > m::kExpHi, 0.0f, 1.0f / tmp[j]);
}
template <class F>
double cyc(F f, float* d, const float* a, long n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200000; ++i) {
    f(d, a, n);
    asm volatile("" ::: "memory");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200000 / n * 4e9 * 16;
}
int main() {
  const long n = 1024;
  std::vector<float> a(n), d(n), e(n), f(n);
  std::mt19937 g(1);
  std::normal_distribution<float> N(0, 2);
  for (auto& v : a) v = N(g);
  a[3] = NAN; a[5] = 100; a[6] = -100; a[7] = 0.f; a[8] = -0.f;
  for (int r = 0; r < 3; ++r)
    printf("tanh one %.1f two %.1f three %.1f | sigmoid one %.1f two %.1f cycles/16\n",
           cyc(tanh_one, d.data(), a.data(), n), cyc(tanh_two, e.data(), a.data(), n), cyc(tanh_three, f.data(), a.data(), n),
           cyc(sig_one, d.data(), a.data(), n), cyc(sig_two, e.data(), a.data(), n));
  tanh_one(d.data(), a.data(), n); tanh_two(e.data(), a.data(), n); tanh_three(f.data(), a.data(), n);
  printf("tanh same bits: %d %d\n", memcmp(d.data(), e.data(), n*4)==0, memcmp(d.data(), f.data(), n*4)==0);
  sig_one(d.data(), a.data(), n); sig_two(e.data(), a.data(), n);
  printf("sig same bits: %d\n", memcmp(d.data(), e.data(), n*4)==0);
}
