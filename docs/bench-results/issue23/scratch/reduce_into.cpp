// runtime::reduce_into and scale_in_place on 1M float32 (4 MiB, in the caches), 16 passes,
// ns per element, three rounds. Build from the repository root after `make build`:
//   g++ -O2 -std=c++20 -Iinclude -Isrc docs/bench-results/issue23/scratch/reduce_into.cpp \
//     build/src/liblazytrace.a $(mpicxx --showme:link) -lopenblas -lxsmm -ldnnl -lgomp \
//     -lpthread -ldl -o /tmp/reduce_into && /tmp/reduce_into
#include <chrono>
#include <cstdio>
#include <vector>
#include "runtime/communicator.h"
int main() {
  const int64_t n = 1 << 20;
  std::vector<float> a(n, 1.f), b(n, 2.f);
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 16; ++k)
      lazytrace::runtime::reduce_into(a.data(), b.data(), n, lazytrace::DType::float32,
                                      lazytrace::runtime::ReduceOp::Sum);
    auto t1 = std::chrono::steady_clock::now();
    for (int k = 0; k < 16; ++k)
      lazytrace::runtime::scale_in_place(a.data(), n, lazytrace::DType::float32, 0.5);
    auto t2 = std::chrono::steady_clock::now();
    std::printf("reduce_into %.2f ns/elem, scale %.2f ns/elem\n",
                std::chrono::duration<double, std::nano>(t1 - t0).count() / (16 * n),
                std::chrono::duration<double, std::nano>(t2 - t1).count() / (16 * n));
  }
}
