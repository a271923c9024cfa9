#pragma once
// What the matmul benchmarks share: the decoder projection shapes and aligned inputs.
// Args: tokens, hidden, inter, down. down = 0 is the up projection (tokens x hidden @
// hidden x inter), down = 1 the down projection (tokens x inter @ inter x hidden).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <sys/mman.h>

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

/**
 * The six products of a decoder MLP's two projections at one size, as training runs them:
 * the forward x Wᵀ (W stored [out, in]: "NT"), the input gradient dY W ("NN") and the
 * weight gradient dYᵀ X ("TN"), for the up projection (hidden -> inter) and the down one.
 * Args: tokens, hidden, inter, product (0-5: up x Wᵀ, down x Wᵀ, up dY W, down dY W, up
 * dYᵀ X, down dYᵀ X).
 */
struct Product {
  int64_t m, k, n;
  bool ta, tb;  // A stored [k, m], B stored [n, k]
};

inline Product product_of(const benchmark::State& state) {
  const int64_t t = state.range(0), h = state.range(1), i = state.range(2);
  switch (state.range(3)) {
    case 0:
      return {t, h, i, false, true};
    case 1:
      return {t, i, h, false, true};
    case 2:
      return {t, i, h, false, false};
    case 3:
      return {t, h, i, false, false};
    case 4:
      return {i, t, h, true, false};
    default:
      return {h, t, i, true, false};
  }
}

inline std::vector<std::vector<int64_t>> decoder_product_args() {
  std::vector<std::vector<int64_t>> args;
  for (auto [hidden, inter] : {std::pair<int64_t, int64_t>{128, 1024}, {512, 2048}})
    for (int64_t product = 0; product < 6; ++product)
      for (int64_t tokens : {16, 64, 256, 512}) args.push_back({tokens, hidden, inter, product});
  return args;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], FreeDeleter>;

/**
 * Aligned like lazytrace's buffers (runtime/buffer.cpp): 64 bytes, and from 4 MiB on, 2 MiB
 * pages asked of the kernel (transparent huge pages, where it gives them), so that copies
 * timed over them see the TLB lazytrace's own large buffers see. Filled with N(0, 1) values.
 */
inline AlignedFloats random_floats(int64_t n, uint32_t seed) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = static_cast<size_t>(n) * sizeof(float) >= size_t{4} << 20;
  const size_t align = huge ? kHugePage : 64;
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + align - 1) / align * align;
  AlignedFloats p(static_cast<float*>(std::aligned_alloc(align, bytes)));
#ifdef MADV_HUGEPAGE
  if (huge) madvise(p.get(), bytes, MADV_HUGEPAGE);
#endif
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
  return p;
}

}  // namespace bench
