#pragma once
// kernels_bench's chains of 8 elementwise ops written as one plain loop, with the math of the
// library's kernels (backends/cpu/math.h), compiled as the library compiles its AVX2 and
// AVX-512 loops (bench/CMakeLists.txt): what a compiler makes of the chain, the yardstick
// of the fused kernel, which interprets the same chain a tile at a time.
#include <cstdint>
#include <type_traits>

#include "backends/cpu/math.h"

namespace bench {

void chain_loop_avx2(const float* x, float* y, int64_t begin, int64_t end, bool cheap);
void chain_loop_avx512(const float* x, float* y, int64_t begin, int64_t end, bool cheap);

// y = x with non-temporal stores of whole vectors, as the fused kernels write large results
// (stream_stores): the memory bandwidth they are held against. x and y 64-byte aligned,
// begin a multiple of 16 floats.
void stream_copy_avx2(const float* x, float* y, int64_t begin, int64_t end);
void stream_copy_avx512(const float* x, float* y, int64_t begin, int64_t end);

// kernels_bench's chain_op, op for op
[[gnu::always_inline]] inline void chain_loop(const float* x, float* y, int64_t begin, int64_t end,
                                              bool cheap) {
  namespace math = lazytrace::cpu::math;
  using K = lazytrace::ir::OpKind;
  auto loop = [&](auto cheap_tag) {
    constexpr bool kCheap = decltype(cheap_tag)::value;
    for (int64_t i = begin; i < end; ++i) {
      float v = x[i] * 1.5f;
      v = v + 0.25f;
      v = kCheap ? math::unary(K::Relu, v) : math::unary(K::Tanh, v);
      v = v * 2.0f;
      v = v - 0.5f;
      v = kCheap ? math::unary(K::Abs, v) : math::unary(K::Sigmoid, v);
      v = v * x[i];
      y[i] = kCheap ? v + 0.125f : math::unary(K::Relu, v);
    }
  };
  if (cheap)
    loop(std::true_type{});
  else
    loop(std::false_type{});
}

}  // namespace bench
