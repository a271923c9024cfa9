#include <atomic>
#include <chrono>
#include <cstdio>
#include "runtime/thread_pool.h"
using clk = std::chrono::steady_clock;
static inline uint64_t rdtsc() {
  return __builtin_ia32_rdtsc();
}
int main() {
  namespace rt = lazytrace::runtime;
  for (double work_us : {0.0, 2.0, 10.0}) {
    uint64_t ticks = (uint64_t)(work_us * 2596);  // TSC at nominal 2.596 GHz
    std::atomic<uint64_t> start1{0};
    uint64_t t0 = 0;
    double lat = 0;
    int N = 100000;
    auto a = clk::now();
    for (int i = 0; i < N; ++i) {
      t0 = rdtsc();
      rt::parallel_for(2, 1, [&](int64_t b, int64_t) {
        uint64_t s = rdtsc();
        if (b == 1) start1.store(s - t0, std::memory_order_relaxed);
        while (rdtsc() - s < ticks) {
        }
      });
      lat += start1.load() / 2596.0;
    }
    auto e = clk::now();
    printf("work %.1f us: %.3f us per parallel_for, worker starts %.3f us after the call\n",
           work_us, std::chrono::duration<double>(e - a).count() / N * 1e6, lat / N);
  }
}
