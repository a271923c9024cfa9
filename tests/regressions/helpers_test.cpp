// The helpers the regression tests share, on a program whose value is known.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "regression_helpers.h"

TEST(FuzzRegression, HelpersReadInputsAndCompare) {
  lt::Tensor a = fuzzreg::input(lt::float16, lt::Shape{2}, {0.5, -1.5});
  lt::Tensor b = fuzzreg::input(lt::int32, lt::Shape{2}, {3, 4});
  lt::Tensor y = a * b;
  lt::sync({y});
  EXPECT_EQ(y.dtype(), lt::float16);
  fuzzreg::expect_values(y, {1.5, -6.0}, {0, 0}, "a * b");
  fuzzreg::expect_values(y, {1.4, 99.0}, {0.2, -1}, "within tolerance, the second unchecked");
}
