// The shared-memory exchange of shared_memory_window.diff (a scratch build: `git apply` it
// on 8c23aac, then `make build`) with two threads of one process as its ranks, on heap
// regions with 4 KiB pages (no argument) or huge pages (any argument): all_gather of 32 MiB,
// reduce_scatter of 64 MiB, all_reduce of 64 MiB, ms on rank 0, the last three of six rounds.
// Build: g++ -O2 -std=c++20 -Iinclude -Isrc shared_memory_threads.cpp build/src/liblazytrace.a
//   $(mpicxx --showme:link) -lopenblas -lxsmm -ldnnl -lgomp -lpthread -ldl -o /tmp/shmt
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
#include "dist/shared_memory.h"
using namespace lazytrace;
int main(int argc, char**) {
  const size_t slot = 4 << 20;
  const size_t rb = dist::SharedMemoryExchange::region_bytes(slot, 2);
  std::vector<char*> regions;
  for (int r = 0; r < 2; ++r) {
    char* p = static_cast<char*>(
        mmap(nullptr, rb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (argc > 1)
      madvise(p, rb, MADV_HUGEPAGE);
    else
      madvise(p, rb, MADV_NOHUGEPAGE);
    regions.push_back(p);
    dist::SharedMemoryExchange::prepare(p);
  }
  const int64_t n = 8 << 20;
  std::vector<double> ag(2), rs(2), ar(2);
  auto body = [&](int r) {
    dist::SharedMemoryExchange ex(regions, r, slot, "t");
    std::vector<float> in(2 * n, 1.f), out(2 * n);
    for (int rep = 0; rep < 6; ++rep) {
      ex.barrier("b");
      auto t0 = std::chrono::steady_clock::now();
      ex.all_gather(in.data(), out.data(), n, DType::float32);
      auto t1 = std::chrono::steady_clock::now();
      ex.reduce_scatter(in.data(), out.data(), n, DType::float32, runtime::ReduceOp::Sum, 0.5);
      auto t2 = std::chrono::steady_clock::now();
      ex.all_reduce(in.data(), out.data(), 2 * n, DType::float32, runtime::ReduceOp::Sum, 0.5);
      auto t3 = std::chrono::steady_clock::now();
      if (r == 0 && rep > 2)
        std::printf("all_gather %.1f reduce_scatter %.1f all_reduce %.1f ms\n",
                    std::chrono::duration<double, std::milli>(t1 - t0).count(),
                    std::chrono::duration<double, std::milli>(t2 - t1).count(),
                    std::chrono::duration<double, std::milli>(t3 - t2).count());
    }
  };
  std::thread t(body, 1);
  body(0);
  t.join();
}
