#pragma once
// Philox4x32-10, a counter-based generator: element i of a random op with (seed, offset)
// is a pure function of (seed, offset + i), so results never depend on threading or
// tiling, and a new seed is only a new parameter value.
#include <cmath>
#include <cstdint>

namespace lazytrace::cpu {

struct Philox {
  static void round(uint32_t c[4], uint32_t k[2]) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57} * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  static void generate(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
    uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    for (int i = 0; i < 10; ++i) round(c, k);
    for (int i = 0; i < 4; ++i) out[i] = c[i];
  }
};

/**
 * U[0, 1) with `bits` random bits (53 for double, 24 for float, 11 for float16, 8 for
 * bfloat16), so every draw is exact in the result dtype and never rounds up to 1.
 */
template <typename T>
inline T uniform(uint64_t seed, uint64_t counter, int bits) {
  uint32_t r[4];
  Philox::generate(seed, counter, r);
  if (bits > 32) {
    const uint64_t x = (static_cast<uint64_t>(r[0]) << 21) | (r[1] >> 11);
    return static_cast<T>(static_cast<double>(x) * (1.0 / 9007199254740992.0));
  }
  return static_cast<T>(static_cast<double>(r[0] >> (32 - bits)) * std::ldexp(1.0, -bits));
}

/** N(0, 1) by Box-Muller over two uniforms of the same counter. */
template <typename T>
inline T normal(uint64_t seed, uint64_t counter) {
  uint32_t r[4];
  Philox::generate(seed, counter, r);
  const double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;  // (0, 1]
  const double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace lazytrace::cpu
