// What the scratch programs that time a function over a 1,024-float tile in L1 share.
#pragma once
#include <chrono>
#include <random>
#include <vector>

// n floats from N(0, 2), the same every run
inline std::vector<float> normal_tile(long n) {
  std::vector<float> a(n);
  std::mt19937 g(1);
  std::normal_distribution<float> N(0, 2);
  for (auto& v : a) v = N(g);
  return a;
}

// f(d, a, n) 200,000 times: cycles per 16 floats, at 4 GHz (clk.c)
template <class F>
double cycles_per_16(F f, float* d, const float* a, long n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200000; ++i) {
    f(d, a, n);
    asm volatile("" ::: "memory");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200000 / n *
         4e9 * 16;
}
