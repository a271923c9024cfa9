// Found by lt_fuzz (seed 1341, shrunk); oracle d:
//   backward throws: [reshape] cannot reshape [1, 1, 1, 0] (0 elements) into [-1, 0]: the known
//   sizes do not divide the element count.
// Reproduce: lt_fuzz --seed 1341 --count 1 --shrink
//
// The program:
//   %0 = input(ints=[3, 0, 0], data[1]) : f32[1, 1, 1, 1]
//   %1 = slice(%0, ints=[3, -2, -2, 1]) : f32[1, 1, 1, 0]
//   %2 = input(ints=[0, 0, 0], f=2) : f64[0, 1]
//   %3 = matmul(%1, %2) : f64[1, 1, 1, 1]
//   outputs: %3
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "regression_helpers.h"

namespace {

using lt::Tensor;
using TV = std::vector<lt::Tensor>;

TV program_Seed1341_d(const fuzzreg::Data& in, const std::vector<double>& lit, TV* leaves) {
  (void)in;
  (void)lit;
  (void)leaves;
  Tensor v0 = fuzzreg::input(lt::float32, lt::Shape{1, 1, 1, 1}, in[0], true);
  leaves->push_back(v0);
  Tensor v1 = lt::slice(v0, 3, -2, -2, 1);
  Tensor v2 = fuzzreg::input(lt::float64, lt::Shape{0, 1}, in[1], true);
  leaves->push_back(v2);
  Tensor v3 = lt::matmul(v1, v2);
  return TV{v3};
}

const fuzzreg::Data kIn_Seed1341_d = {
    {1.7373011112213135},
    {},
};
const std::vector<double> kLit_Seed1341_d = {};

}  // namespace

TEST(FuzzRegression, Seed1341_d) {
  lt::manual_seed(1341);
  TV leaves;
  TV out = program_Seed1341_d(kIn_Seed1341_d, kLit_Seed1341_d, &leaves);
  Tensor loss;
  {
    Tensor w = lt::astype(lt::tensor(std::vector<double>{-0.18930169939994812}, out[0].shape()),
                          out[0].dtype());
    Tensor term = lt::sum(out[0] * w);
    loss = loss.defined() ? loss + term : term;
  }
  loss.backward();
  {
    Tensor g = leaves[0].grad();
    ASSERT_TRUE(g.defined());
    fuzzreg::expect_values(g, {0.0}, {9.9999999999999995e-08}, "the gradient of input 0");
  }
  {
    Tensor g = leaves[1].grad();
    ASSERT_TRUE(g.defined());
    fuzzreg::expect_values(g, {}, {}, "the gradient of input 1");
  }
}
