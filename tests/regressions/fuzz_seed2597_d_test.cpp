// Found by lt_fuzz (seed 2597, shrunk); oracle d:
//   the gradient along a random direction is 0.067680660150372995, central differences of the
//   reference give 0.65417359659258878 (tolerance 3.145240800654223e-06)
// Reproduce: lt_fuzz --seed 2597 --count 1 --shrink
//
// The program:
//   %0 = input(ints=[0, 0, 0], data[3]) : f64[1, 3]
//   %1 = input(ints=[3, 0, 0], data[3]) : f64[1, 3]
//   %2 = transpose(%0, ints=[0, 1]) : f64[3, 1]
//   %3 = matmul(%1, %2) : f64[1, 1]
//   %4 = squeeze(%3, ints=[1]) : f64[1]
//   outputs: %4
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "regression_helpers.h"

namespace {

using lt::Tensor;
using TV = std::vector<lt::Tensor>;

TV program_Seed2597_d(const fuzzreg::Data& in, const std::vector<double>& lit, TV* leaves) {
  (void)in;
  (void)lit;
  (void)leaves;
  Tensor v0 = fuzzreg::input(lt::float64, lt::Shape{1, 3}, in[0], true);
  leaves->push_back(v0);
  Tensor v1 = fuzzreg::input(lt::float64, lt::Shape{1, 3}, in[1], true);
  leaves->push_back(v1);
  Tensor v2 = lt::transpose(v0, 0, 1);
  Tensor v3 = lt::matmul(v1, v2);
  Tensor v4 = lt::squeeze(v3, 1);
  return TV{v4};
}

const fuzzreg::Data kIn_Seed2597_d = {
    {-0.82456378877415326, -0.43325902985261999, 0.93246534336335163},
    {-1.2751628160476685, -1.4423626661300659, 0.30246362090110779},
};
const std::vector<double> kLit_Seed2597_d = {};

}  // namespace

TEST(FuzzRegression, Seed2597_d) {
  lt::manual_seed(2597);
  TV leaves;
  TV out = program_Seed2597_d(kIn_Seed2597_d, kLit_Seed2597_d, &leaves);
  Tensor loss;
  {
    Tensor w = lt::astype(lt::tensor(std::vector<double>{0.4467257559299469}, out[0].shape()),
                          out[0].dtype());
    Tensor term = lt::sum(out[0] * w);
    loss = loss.defined() ? loss + term : term;
  }
  loss.backward();
  {
    Tensor g = leaves[0].grad();
    ASSERT_TRUE(g.defined());
    fuzzreg::expect_values(g, {-0.56964807293446995, -0.64434055235818022, 0.13511828968471029},
                           {1.3139886252926501e-06, 1.3886811047163603e-06, 8.7945884204289046e-07},
                           "the gradient of input 0");
  }
  {
    Tensor g = leaves[1].grad();
    ASSERT_TRUE(g.defined());
    fuzzreg::expect_values(g, {-0.36835388185774137, -0.19354796762516277, 0.41655628539305484},
                           {8.8491016725079621e-07, 7.1010425301821752e-07, 9.3311257078610965e-07},
                           "the gradient of input 1");
  }
}
