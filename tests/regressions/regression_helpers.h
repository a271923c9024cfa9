#pragma once
// Helpers of the regression tests lt_fuzz writes (tests/fuzz/regression.cpp): inputs from
// literal values, and checks of values against the reference interpreter's.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <string>
#include <vector>

#include "../passes_off.h"

namespace fuzzreg {

using Data = std::vector<std::vector<double>>;

/** A tensor of dtype d holding `values` (exact in d); float16/bfloat16 by way of float32. */
inline lt::Tensor input(lt::DType d, const lt::Shape& shape, const std::vector<double>& values,
                        bool requires_grad = false) {
  lt::Tensor t;
  switch (d) {
    case lt::DType::float32:
      t = lt::tensor(std::vector<float>(values.begin(), values.end()), shape);
      break;
    case lt::DType::float64:
      t = lt::tensor(values, shape);
      break;
    case lt::DType::int32:
      t = lt::tensor(std::vector<int32_t>(values.begin(), values.end()), shape);
      break;
    case lt::DType::int64:
      t = lt::tensor(std::vector<int64_t>(values.begin(), values.end()), shape);
      break;
    case lt::DType::bool_: {
      std::vector<bool> b;
      for (double v : values) b.push_back(v != 0);
      t = lt::tensor(b, shape);
      break;
    }
    case lt::DType::float16:
    case lt::DType::bfloat16:
      t = lt::astype(lt::tensor(std::vector<float>(values.begin(), values.end()), shape), d);
      break;
  }
  if (requires_grad) t.requires_grad_();
  return t;
}

/** Every element of t within tol[i] of want[i] (0: equal; negative: not checked). */
inline void expect_values(const lt::Tensor& t, const std::vector<double>& want,
                          const std::vector<double>& tol, const std::string& what) {
  const std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (tol[i] < 0) continue;
    if (!(std::abs(got[i] - want[i]) <= tol[i]) && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", expected " << want[i]
                    << (tol[i] == 0 ? std::string(" exactly")
                                    : " within " + std::to_string(tol[i]));
  }
}

/** Switches optional passes off for a scope (the tests' one helper). */
using lt_test::PassesOff;

}  // namespace fuzzreg
