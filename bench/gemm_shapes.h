#pragma once
// What the matmul benchmarks share: the decoder projection shapes and aligned inputs.
// Args: tokens, hidden, inter, down. down = 0 is the up projection (tokens x hidden @
// hidden x inter), down = 1 the down projection (tokens x inter @ inter x hidden).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>

namespace bench {

struct Gemm {
  int64_t m, k, n;
};

inline Gemm gemm_of(const benchmark::State& state) {
  const int64_t tokens = state.range(0), hidden = state.range(1), inter = state.range(2);
  return state.range(3) == 0 ? Gemm{tokens, hidden, inter} : Gemm{tokens, inter, hidden};
}

inline void decoder_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "hidden", "inter", "down"});
  for (int64_t hidden : {128, 256})
    for (int64_t inter : {1024, 2048})
      for (int64_t down : {0, 1})
        for (int64_t tokens : {16, 64, 256, 512}) b->Args({tokens, hidden, inter, down});
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], FreeDeleter>;

/** 64-byte aligned like lazytrace's buffers, filled with N(0, 1) values. */
inline AlignedFloats random_floats(int64_t n, uint32_t seed) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  AlignedFloats p(static_cast<float*>(std::aligned_alloc(64, bytes)));
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
  return p;
}

}  // namespace bench
