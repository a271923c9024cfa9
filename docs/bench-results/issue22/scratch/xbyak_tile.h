#pragma once
// What tanh_interleave.cpp and chain_lockstep.cpp share: a code generator with its constants
// in a pool, the loop around its body, a tile in L1 and the timer.
#include <xbyak/xbyak.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tile {

inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The code is void f(const float* x, float* y, int64_t n, const uint32_t* consts): x in rdi,
// y in rsi, n in r8, the pool in rdx, the index in r10.
using Fn = void (*)(const float*, float*, int64_t, const uint32_t*);

struct PoolGen : Xbyak::CodeGenerator {
  std::vector<uint32_t> pool;
  PoolGen() : Xbyak::CodeGenerator(1 << 16) {}
  // a constant as a broadcast operand, by its bits or its value ...
  Xbyak::Address cb(uint32_t b) { return ptr_b[rdx + 4 * index(b)]; }
  Xbyak::Address c(float f) { return cb(bits(f)); }
  // ... or as one float, to broadcast into a register
  Xbyak::Address cs(float f) { return ptr[rdx + 4 * index(bits(f))]; }
  void begin() {
    mov(r8, rdx);
    mov(rdx, rcx);
    xor_(r10, r10);
  }
  void end(Xbyak::Label& loop, int vectors) {
    add(r10, 16 * vectors);
    cmp(r10, r8);
    jl(loop);
    vzeroupper();
    ret();
  }

 private:
  int index(uint32_t b) {
    size_t i = 0;
    while (i < pool.size() && pool[i] != b) ++i;
    if (i == pool.size()) pool.push_back(b);
    return static_cast<int>(i);
  }
};

// n floats of every magnitude tanh and sigmoid treat apart
inline std::vector<float> input(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] = std::ldexp(std::sin(i * 0.37) * 3, (i % 7) - 3);
  return x;
}

// g's code over x (its length a multiple of 16 floats times g's vectors): its results' bits
// in `out`, and its cycles per 16 floats at `ghz`, the best of 20 rounds of 4,000 calls
inline double cycles(PoolGen& g, const std::vector<float>& x, std::vector<uint32_t>& out,
                     double ghz) {
  g.ready();
  const std::vector<uint32_t> pool = g.pool;
  const Fn f = g.getCode<Fn>();
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  f(x.data(), y.data(), n, pool.data());
  out.resize(x.size());
  std::memcpy(out.data(), y.data(), x.size() * 4);
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 4000; ++it) f(x.data(), y.data(), n, pool.data());
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4000);
  }
  return best * ghz * 1e9 / (static_cast<double>(n) / 16);
}

}  // namespace tile
