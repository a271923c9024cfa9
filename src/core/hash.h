#pragma once
// 64-bit hashing for graph structure: node hashes are built from these when a node is made.
#include <cstdint>
#include <cstring>

namespace lazytrace {

inline uint64_t hash_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline uint64_t hash_combine(uint64_t seed, uint64_t v) {
  return hash_mix(seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)));
}

/** One cheap absorbing step for word-by-word hashing on hot paths (finish with hash_mix). */
inline uint64_t hash_step(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

inline uint64_t hash_double(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return hash_mix(u);
}

}  // namespace lazytrace
