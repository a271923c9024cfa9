#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "backends/cpu/math.h"
#include "tile_cycles.h"
namespace m = lazytrace::cpu::math;
using K = lazytrace::ir::OpKind;
template <K op>
__attribute__((noinline)) void plain(float* d, const float* a, long n) {
  for (long j = 0; j < n; ++j) d[j] = m::unary(op, a[j]);
}
template <K op>
__attribute__((noinline)) void streams4(float* d, const float* a, long n) {
  long q = n / 4;
  for (long j = 0; j < q; ++j) {
    d[j] = m::unary(op, a[j]);
    d[j + q] = m::unary(op, a[j + q]);
    d[j + 2 * q] = m::unary(op, a[j + 2 * q]);
    d[j + 3 * q] = m::unary(op, a[j + 3 * q]);
  }
}
int main() {
  const long n = 1024;
  std::vector<float> a = normal_tile(n), d(n), e(n);
  auto run = [&](auto opc) {
    constexpr K op = decltype(opc)::value;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200000; ++i) {
        plain<op>(d.data(), a.data(), n);
        asm volatile("" ::: "memory");
      }
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200000; ++i) {
        streams4<op>(e.data(), a.data(), n);
        asm volatile("" ::: "memory");
      }
      auto t2 = std::chrono::steady_clock::now();
      double p = std::chrono::duration<double>(t1 - t0).count() / 200000 / n * 4e9 * 16;
      double s = std::chrono::duration<double>(t2 - t1).count() / 200000 / n * 4e9 * 16;
      printf("op %d: plain %.1f cycles/16, streams4 %.1f, same=%d\n", (int)op, p, s, d == e);
    }
  };
  run(std::integral_constant<K, K::Tanh>{});
  run(std::integral_constant<K, K::Sigmoid>{});
  run(std::integral_constant<K, K::Exp>{});
}
