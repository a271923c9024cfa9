// Found by lt_fuzz (seed 3628, shrunk); oracle crash:
//   signal 6 (Aborted) in a
// Reproduce: lt_fuzz --seed 3628 --count 1 --shrink
//
// The program:
//   %0 = input(ints=[3, 0, 0], data[1]) : f64[1, 1, 1, 1]
//   %1 = input(ints=[3, 0, 0], data[1]) : f64[1, 1, 1, 1]
//   %2 = assume_pure(%0, ints=[0, 0]) -> (f64[1])
//       params: f64[1, 1, 1, 1]
//       %0 = param(ints=[0]) : f64[1, 1, 1, 1]
//       %1 = reshape(%0, ints=[0]) : f64[1]
//       outputs: %1
//   %3 = result(%2, ints=[0]) : f64[1]
//   %4 = abs(%3) : f64[1]
//   %5 = add(%4, %1) : f64[1, 1, 1, 1]
//   outputs: %5
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "regression_helpers.h"

namespace {

using lt::Tensor;
using TV = std::vector<lt::Tensor>;

TV program_Seed3628_crash(const fuzzreg::Data& in, const std::vector<double>& lit, TV* leaves) {
  (void)in;
  (void)lit;
  (void)leaves;
  Tensor v0 = fuzzreg::input(lt::float64, lt::Shape{1, 1, 1, 1}, in[0]);
  Tensor v1 = fuzzreg::input(lt::float64, lt::Shape{1, 1, 1, 1}, in[1]);
  auto pure0_0 = lt::assume_pure([&](const TV& p1, double s1) -> TV {
    (void)p1;
    (void)s1;
    Tensor b1_0 = p1[0];
    Tensor b1_1 = lt::reshape(b1_0, lt::Shape{-1});
    return TV{b1_1};
  });
  TV r0_2 = pure0_0(TV{v0}, 0.0);
  Tensor v3 = r0_2[0];
  Tensor v4 = lt::abs(v3);
  Tensor v5 = lt::add(v4, v1);
  return TV{v5};
}

const fuzzreg::Data kIn_Seed3628_crash = {
    {-3.6349630427363806},
    {0.48735404014587402},
};
const std::vector<double> kLit_Seed3628_crash = {};

}  // namespace

TEST(FuzzRegression, Seed3628_crash) {
  lt::manual_seed(3628);
  // every pass on, then the stage lt_fuzz crashed in (a)
  {
    TV out = program_Seed3628_crash(kIn_Seed3628_crash, kLit_Seed3628_crash, nullptr);
    lt::sync(out);
  }
  TV out = program_Seed3628_crash(kIn_Seed3628_crash, kLit_Seed3628_crash, nullptr);
  lt::sync(out);
  fuzzreg::expect_values(out[0], {4.1223170828822546}, {0.0}, "output 0");
}
