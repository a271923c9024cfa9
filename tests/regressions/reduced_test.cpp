// The defects lt_fuzz found, each reduced by hand from the shrunk program (the generated
// files beside this one, fuzz_seed*_test.cpp, hold the shrunk programs themselves) to the
// smallest program that shows it. Each asserts the correct value, so it fails until the
// defect is fixed; it is DISABLED_ until then (run with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <string>
#include <vector>

#include "regression_helpers.h"

namespace {

using lt::Tensor;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

}  // namespace

// An assume_pure function whose result is a reshape of its input: the call, inlined, leaves
// the reshape's view with the input's shape, so the op reading it loads with the wrong
// strides (wrong values; with other shapes a heap-buffer-overflow in
// cpu::broadcast_view, views.cpp, which corrupts the heap: lt_fuzz seeds 1069, 1265, 3358,
// 3628 crashed in free()).
TEST(FuzzRegression, PureReturningReshapeOfItsInput) {
  Tensor x = lt::tensor(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  auto f = lt::assume_pure([](const Tensor& t) { return lt::reshape(t, {3, 2}); });
  Tensor y = f(x) * 2.0f;
  lt::sync({y});
  EXPECT_EQ(values(y), (std::vector<double>{0, 2, 4, 6, 8, 10}));
}

// The same through a tensor the function captures, read by slice and concat (lt_fuzz seed
// 1512: a heap-buffer-overflow in cpu::slice_view, views.cpp, then a segfault).
TEST(FuzzRegression, PureReturningReshapeOfACapturedTensor) {
  Tensor x = lt::tensor(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor unused = lt::tensor(std::vector<float>{7}, {1});
  auto f = lt::assume_pure([&x](const Tensor&) { return lt::reshape(x, {3, 2}); });
  Tensor r = f(unused);
  Tensor y = lt::concat({lt::slice(r, 1, 1, 2), r}, 1);
  lt::sync({y});
  EXPECT_EQ(values(y), (std::vector<double>{1, 0, 1, 3, 2, 3, 5, 4, 5}));
}

// transposed_products on a product with one column: transpose(a @ b) for a [3, 1] and
// b [1, 1] called BLAS with an illegal leading dimension ("On entry to DGEMM parameter
// number 8 had an illegal value") and returned what the buffer held (fixed: a size-1
// dim's stride no longer sets the leading dimension, cpu/matmul.cpp). The gradient of
// c @ transpose(x) meets it too (lt_fuzz seeds 2061, 2597, 2856, 3678).
TEST(FuzzRegression, TransposedProductWithOneColumn) {
  Tensor a = lt::tensor(std::vector<double>{0.5, -1, 2}, {3, 1});
  Tensor b = lt::tensor(std::vector<double>{3}, {1, 1});
  Tensor y = lt::transpose(lt::matmul(a, b), 0, 1);
  lt::sync({y});
  EXPECT_EQ(values(y), (std::vector<double>{1.5, -3, 6}));
}

TEST(FuzzRegression, GradientThroughProductWithATransposedRow) {
  Tensor x = lt::tensor(std::vector<double>{1, 2, 3}, {1, 3});
  x.requires_grad_();
  Tensor c = lt::tensor(std::vector<double>{0.5, -1, 2}, {1, 3});
  Tensor loss = lt::sum(lt::matmul(c, lt::transpose(x, 0, 1)) * 3.0);
  loss.backward();
  Tensor g = x.grad();
  lt::sync({g});
  EXPECT_EQ(values(g), (std::vector<double>{1.5, -3, 6}));
}

// The gradient of a batched matmul over an empty contraction dim: matmul_vjp reshaped a to
// [-1, k] with k = 0 and reshape refused ("the known sizes do not divide the element
// count"); the gradient is zeros (lt_fuzz seed 1341). An empty result dim met it too.
TEST(FuzzRegression, GradientOfBatchedMatmulOverAnEmptyDim) {
  Tensor a = lt::zeros({2, 1, 0});
  a.requires_grad_();
  Tensor b = lt::zeros({0, 3});
  b.requires_grad_();
  Tensor loss = lt::sum(lt::matmul(a, b));
  EXPECT_NO_THROW(loss.backward());
  Tensor ga = a.grad(), gb = b.grad();
  ASSERT_TRUE(ga.defined() && gb.defined());
  EXPECT_EQ(ga.shape(), (lt::Shape{2, 1, 0}));
  EXPECT_EQ(gb.shape(), (lt::Shape{0, 3}));

  Tensor c = lt::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 1, 3});
  c.requires_grad_();
  Tensor d = lt::zeros({3, 0});
  d.requires_grad_();
  lt::sum(lt::matmul(c, d)).backward();
  EXPECT_EQ(values(c.grad()), std::vector<double>(6, 0.0));
  EXPECT_EQ(d.grad().shape(), (lt::Shape{3, 0}));
}

// softmax and log_softmax along a dim of size 0 threw amax's "cannot reduce over dim 0 of
// size 0" (its max subtraction); an empty softmax is an empty tensor, as in PyTorch (lt_fuzz
// seeds 1489, 1894, 2252, 3315).
TEST(FuzzRegression, SoftmaxAlongEmptyDim) {
  Tensor x = lt::zeros({0, 2});
  Tensor y, z;
  EXPECT_NO_THROW(y = lt::softmax(x, 0));
  EXPECT_NO_THROW(z = lt::log_softmax(x, 0));
  ASSERT_TRUE(y.defined() && z.defined());
  EXPECT_EQ(y.shape(), (lt::Shape{0, 2}));
  EXPECT_EQ(z.shape(), (lt::Shape{0, 2}));
  Tensor w = lt::softmax(lt::zeros({2, 0}), -1);
  lt::sync({y, z, w});
  EXPECT_EQ(w.shape(), (lt::Shape{2, 0}));
  // along the other dim the rows are empty but the dim is not: a softmax of two zeros
  Tensor v = lt::softmax(lt::zeros({0, 2}), -1);
  EXPECT_EQ(v.shape(), (lt::Shape{0, 2}));
}

// A tensor of rank 9 or more could not be reduced or permuted: the node's attributes held 8
// ints ("[ir] too many attributes (more than 8 dims)"; lt_fuzz seed 2217, through the loss of
// the gradient check). They spill to the heap past eight now.
TEST(FuzzRegression, SumOfRank9Tensor) {
  std::vector<int64_t> dims(9, 1);
  dims[0] = 2;
  dims[8] = 3;
  Tensor x = lt::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, lt::Shape(dims));
  x.requires_grad_();
  EXPECT_EQ(lt::sum(x).item<float>(), 21.0f);
  Tensor s = lt::sum(x, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(values(s), (std::vector<double>{5, 7, 9}));
  Tensor p = lt::permute(x, {8, 7, 6, 5, 4, 3, 2, 1, 0});
  EXPECT_EQ(p.shape()[0], 3);
  EXPECT_EQ(p.shape()[8], 2);
  EXPECT_EQ(values(p), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  // the gradient of a weighted sum through the permute and a partial sum
  Tensor w = lt::tensor(std::vector<float>{1, 10, 100}, {3});
  lt::sum(lt::sum(p, {1, 2, 3, 4, 5, 6, 7, 8}) * w).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 10, 100, 1, 10, 100}));
}

// The gradient of a scan whose body calls an assume_pure function that captures a value the
// body computed (not one of its inputs): building the reverse body crashed (ir::build_graph
// from make_diff, a segfault; lt_fuzz seed 16214, a fori_loop around it): ir::partition saved
// the call's Pack of captured tensors as if it were a value. Capturing the carry worked.
TEST(FuzzRegression, ScanGradientThroughAssumePureCapturingABodyValue) {
  Tensor h0 = lt::tensor(std::vector<float>{0.5f, 1.0f}, {2});
  h0.requires_grad_();
  Tensor xs = lt::tensor(std::vector<float>{1, 2}, {2, 1});
  auto body = [](const Tensor& h, const Tensor& x) {
    Tensor r = h * 1.5f;
    auto f = lt::assume_pure([r](const Tensor& t) { return r + t; });
    return std::pair{f(x), x};
  };
  auto [hn, ys] = lt::scan(body, h0, xs);
  lt::sum(hn).backward();
  Tensor g = h0.grad();
  lt::sync({g});
  EXPECT_EQ(values(g), (std::vector<double>{2.25, 2.25}));
}

// abs(-0.0) was -0.0 (math::unary computed x < 0 ? -x : x), where PyTorch's abs and std::abs
// clear the sign: atan2(abs(-0.0), -1) gave -pi instead of pi (lt_fuzz seed 24484).
TEST(FuzzRegression, AbsOfNegativeZeroIsPositive) {
  Tensor z = lt::tensor(std::vector<float>{-0.0f}, {1});
  Tensor a = lt::abs(z);
  Tensor t = lt::atan2(a, lt::tensor(std::vector<float>{-1.0f}, {1}));
  lt::sync({a, t});
  EXPECT_FALSE(std::signbit(a.to_vector<float>()[0]));
  EXPECT_FLOAT_EQ(t.to_vector<float>()[0], 3.14159265f);
}

// maximum(-0.0, +0.0) was +0.0 but maximum(+0.0, -0.0) was -0.0 (the second operand on a tie),
// so atan2(0, maximum(x * 0, y)) gave pi or 0 by the operands' order (lt_fuzz seed 1003286).
// maximum and minimum now follow IEEE 754-2019: -0 is below +0, whatever the order.
TEST(FuzzRegression, MaximumAndMinimumOfSignedZeros) {
  Tensor a = lt::tensor(std::vector<double>{-0.0, 0.0, -0.0, 0.0}, {4});
  Tensor b = lt::tensor(std::vector<double>{0.0, -0.0, -0.0, 0.0}, {4});
  for (const Tensor& t : {lt::maximum(a, b), lt::maximum(b, a)}) {
    const std::vector<double> v = values(t);
    EXPECT_FALSE(std::signbit(v[0]) || std::signbit(v[1]) || std::signbit(v[3]));
    EXPECT_TRUE(std::signbit(v[2]));
  }
  for (const Tensor& t : {lt::minimum(a, b), lt::minimum(b, a)}) {
    const std::vector<double> v = values(t);
    EXPECT_TRUE(std::signbit(v[0]) && std::signbit(v[1]) && std::signbit(v[2]));
    EXPECT_FALSE(std::signbit(v[3]));
  }
  // float32 and float16 take the same path
  Tensor h = lt::astype(a, lt::float16), k = lt::astype(b, lt::float16);
  EXPECT_FALSE(std::signbit(lt::maximum(h, k).to_vector<float>()[0]));
  EXPECT_TRUE(std::signbit(
      lt::minimum(lt::astype(b, lt::float32), lt::astype(a, lt::float32)).to_vector<float>()[0]));
}
