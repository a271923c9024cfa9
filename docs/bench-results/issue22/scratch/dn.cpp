#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <vector>
#include "runtime/thread_pool.h"
static inline uint64_t rdtsc() {
  return __builtin_ia32_rdtsc();
}
int main() {
  namespace rt = lazytrace::runtime;
  const int m = 16, k = 128, n = 1024;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  uint64_t dur[2] = {0, 0}, start[2] = {0, 0};
  int N = 50000;
  auto call = [&](int64_t blk) {
    int threads = omp_get_max_threads();
    if (threads != 1) omp_set_num_threads(1);
    dnnl_sgemm('N', 'N', m, n / 2, k, 1.0f, a.data(), k, b.data() + blk * n / 2, n, 0.0f,
               c.data() + blk * n / 2, n);
    if (threads != 1) omp_set_num_threads(threads);
  };
  for (int i = 0; i < 1000; ++i) rt::parallel_for(2, 1, [&](int64_t bb, int64_t) { call(bb); });
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    uint64_t s0 = rdtsc();
    rt::parallel_for(2, 1, [&](int64_t bb, int64_t) {
      uint64_t s = rdtsc();
      start[bb] += s - s0;
      call(bb);
      dur[bb] += rdtsc() - s;
    });
  }
  auto t1 = std::chrono::steady_clock::now();
  printf("total %.2f us/call; main block %.2f us, worker block %.2f us (starts %.2f us late)\n",
         std::chrono::duration<double>(t1 - t0).count() / N * 1e6, dur[0] / 2596.0 / N,
         dur[1] / 2596.0 / N, (start[1]) / 2596.0 / N);
  omp_set_num_threads(2);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i)
    dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  t1 = std::chrono::steady_clock::now();
  printf("oneDNN own 2 threads: %.2f us/call\n",
         std::chrono::duration<double>(t1 - t0).count() / N * 1e6);
}
