// Found by lt_fuzz (seed 3678, shrunk); oracle a:
//   output 0 (%5 matmul, f32[1]) at [0]: got 0, expected 20.384931564331055 within
//   0.00019440585915128528
// Reproduce: lt_fuzz --seed 3678 --count 1 --shrink
//
// The program:
//   %0 = input(ints=[0, 0, 0], data[6]) : f32[1, 6]
//   %1 = input(ints=[3, 0, 0], data[6]) : f32[6, 1]
//   %2 = matmul(%0, %1) : f32[1, 1]
//   %3 = input(ints=[3, 0, 0], data[1]) : i64[1]
//   %4 = transpose(%2, ints=[0, 1]) : f32[1, 1]
//   %5 = matmul(%3, %4) : f32[1]
//   outputs: %5
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "regression_helpers.h"

namespace {

using lt::Tensor;
using TV = std::vector<lt::Tensor>;

TV program_Seed3678_a(const fuzzreg::Data& in, const std::vector<double>& lit, TV* leaves) {
  (void)in;
  (void)lit;
  (void)leaves;
  Tensor v0 = fuzzreg::input(lt::float32, lt::Shape{1, 6}, in[0]);
  Tensor v1 = fuzzreg::input(lt::float32, lt::Shape{6, 1}, in[1]);
  Tensor v2 = lt::matmul(v0, v1);
  Tensor v3 = fuzzreg::input(lt::int64, lt::Shape{1}, in[2]);
  Tensor v4 = lt::transpose(v2, 0, 1);
  Tensor v5 = lt::matmul(v3, v4);
  return TV{v5};
}

const fuzzreg::Data kIn_Seed3678_a = {
    {0.84507924318313599, -1.740236759185791, -1.3603898286819458, -0.08234039694070816,
     0.8798862099647522, -0.64865571260452271},
    {0.84507924318313599, -1.740236759185791, -1.3603898286819458, -0.08234039694070816,
     0.8798862099647522, -0.64865571260452271},
    {3.0},
};
const std::vector<double> kLit_Seed3678_a = {};

}  // namespace

TEST(FuzzRegression, Seed3678_a) {
  lt::manual_seed(3678);
  TV out = program_Seed3678_a(kIn_Seed3678_a, kLit_Seed3678_a, nullptr);
  lt::sync(out);
  fuzzreg::expect_values(out[0], {20.384931564331055}, {0.00019440585915128528}, "output 0");
}
