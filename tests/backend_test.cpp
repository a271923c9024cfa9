// The CPU backend's instruction-set copies: the AVX2 float32 loops compute the same bits as
// the baseline loops, for every elementwise op and special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/elementwise.h"

namespace {

using lazytrace::ir::OpKind;
namespace cpu = lazytrace::cpu;

std::vector<float> inputs(uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {
      0.0f,    -0.0f, 1.0f,   -1.0f,  0.5f,   -0.625f,
      0.625f,  88.7f, 88.8f,  -87.3f, -87.4f, 1e-40f,
      -1e-40f, 1e30f, -1e30f, inf,    -inf,   std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  while (v.size() < 1031) v.push_back(d(g));  // not a multiple of 8: the loops' tails too
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&got[i], &want[i], sizeof(float)))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(CpuKernels, Avx2LoopsComputeTheBaselineBits) {
  if (!cpu::has_avx2()) GTEST_SKIP() << "this CPU (or LAZYTRACE_NO_AVX2) runs the baseline only";
  const std::vector<float> a = inputs(1), b = inputs(2);
  const size_t n = a.size();
  std::vector<float> got(n), want(n);
  for (OpKind op : {OpKind::Neg, OpKind::Exp, OpKind::Log, OpKind::Sin, OpKind::Cos, OpKind::Tanh,
                    OpKind::Sigmoid, OpKind::Relu, OpKind::Gelu, OpKind::Silu, OpKind::Sqrt,
                    OpKind::Rsqrt, OpKind::Abs, OpKind::Erf}) {
    cpu::unary_f32_avx2(op, got.data(), a.data(), n);
    cpu::elementwise::unary<float>(op, want.data(), a.data(), n);
    expect_same_bits(got, want, lazytrace::ir::op_name(op));
  }
  for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow,
                    OpKind::Maximum, OpKind::Minimum}) {
    cpu::binary_f32_avx2(op, got.data(), a.data(), b.data(), n);
    cpu::elementwise::binary<float>(op, want.data(), a.data(), b.data(), n);
    expect_same_bits(got, want, lazytrace::ir::op_name(op));
    for (bool a_one : {true, false}) {  // one operand a single value
      cpu::binary_scalar_f32_avx2(op, got.data(), a.data() + 2, a_one, b.data(), !a_one, n);
      cpu::elementwise::binary_scalar<float>(op, want.data(), a.data() + 2, a_one, b.data(), !a_one,
                                             n);
      expect_same_bits(got, want, lazytrace::ir::op_name(op));
    }
  }
}

}  // namespace
