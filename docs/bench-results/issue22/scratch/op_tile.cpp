// One binary op with a constant over a 1,024-float tile in L1 (the interpreter's loop), and a
// memcpy of the tile, in ns per tile: what an interpreted op costs (Zen 4, 2026-12-04).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include "backends/cpu/elementwise.h"
using namespace lazytrace;
int main() {
  const long n = 1024;
  std::vector<float> a(8 * 2048, 1.0f);
  float c = 1.5f;
  for (int r = 0; r < 3; ++r) {
    for (long off : {0L, 1024L, 1040L}) {
      float* src = a.data();
      float* dst = a.data() + 2048 + off;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200000; ++i) {
        cpu::binary_scalar_f32_avx512(ir::OpKind::Mul, dst, src, false, &c, true, n);
        asm volatile("" ::: "memory");
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      printf("off %ld: %.2f ns per tile, %.2f cycles/zmm at 3.7GHz\n", off, s / 200000 * 1e9,
             s / 200000 * 3.7e9 / 64);
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200000; ++i) {
        std::memcpy(dst, src, n * 4);
        asm volatile("" ::: "memory");
      }
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      printf("   memcpy 4KiB: %.2f ns\n", s / 200000 * 1e9);
    }
  }
}
