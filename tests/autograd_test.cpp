// Autograd: one gradient-check harness over every differentiable op (analytic gradients
// against central finite differences in float64), then PyTorch's semantics: accumulation,
// zero_grad, detach, NoGradGuard, retain_graph, the tape across sync(), and the errors.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>

#include "expect_error.h"
#include "op_coverage.h"

namespace {

using Ts = std::vector<lt::Tensor>;
using Fn = std::function<lt::Tensor(const Ts&)>;

struct In {
  lt::Shape shape;
  double lo = -2, hi = 2;
};

struct GradCase {
  std::string name;
  std::vector<In> inputs;
  Fn f;
};

std::vector<double> random_values(int64_t n, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

// loss(x) = sum(f(x) * w) for fixed random weights w, so every output element matters.
double loss_value(const GradCase& c, const std::vector<std::vector<double>>& values,
                  const std::vector<double>& w, const lt::Shape& out_shape) {
  lt::NoGradGuard no_grad;
  Ts xs;
  for (size_t i = 0; i < values.size(); ++i) xs.push_back(lt::tensor(values[i], c.inputs[i].shape));
  return lt::sum(c.f(xs) * lt::tensor(w, out_shape)).item<double>();
}

// Returns the largest norm-wise relative error over the inputs and checks every element.
void check_gradients(const GradCase& c) {
  SCOPED_TRACE(c.name);
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::vector<std::vector<double>> values;
  Ts xs;
  for (const In& in : c.inputs) {
    values.push_back(random_values(in.shape.numel(), in.lo, in.hi, rng));
    xs.push_back(lt::tensor(values.back(), in.shape).requires_grad_());
  }
  lt::Tensor out = c.f(xs);
  ASSERT_EQ(out.dtype(), lt::float64);
  ASSERT_TRUE(out.requires_grad());
  std::vector<double> w = random_values(out.numel(), 0.5, 1.5, rng);
  lt::Tensor loss = lt::sum(out * lt::tensor(w, out.shape()));
  Ts grads = lt::autograd::grad({loss}, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(grads[i].shape(), xs[i].shape()) << "input " << i;
    ASSERT_EQ(grads[i].dtype(), lt::float64) << "input " << i;
    std::vector<double> analytic = grads[i].to_vector<double>();
    double diff2 = 0, ref2 = 0;
    for (size_t k = 0; k < values[i].size(); ++k) {
      const double x0 = values[i][k], h = 1e-5 * std::max(1.0, std::fabs(x0));
      values[i][k] = x0 + h;
      const double up = loss_value(c, values, w, out.shape());
      values[i][k] = x0 - h;
      const double down = loss_value(c, values, w, out.shape());
      values[i][k] = x0;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[k], numeric, 1e-6 * std::max(1.0, std::fabs(numeric)))
          << "input " << i << " element " << k;
      diff2 += (analytic[k] - numeric) * (analytic[k] - numeric);
      ref2 += numeric * numeric;
    }
    if (ref2 > 0) {
      EXPECT_LE(std::sqrt(diff2 / ref2), 1e-6) << "input " << i;
    }
  }
}

GradCase unary_case(const char* name, lt::Tensor (*op)(const lt::Tensor&), double lo = -2,
                    double hi = 2) {
  return {name, {{{3, 4}, lo, hi}}, [op](const Ts& x) { return op(x[0]); }};
}

std::vector<GradCase> grad_cases() {
  using lt::Tensor;
  std::vector<GradCase> cases = {
      unary_case("neg", lt::neg),           unary_case("exp", lt::exp),
      unary_case("log", lt::log, 0.2, 3),   unary_case("log1p", lt::log1p, -0.8, 3),
      unary_case("sin", lt::sin),           unary_case("cos", lt::cos),
      unary_case("tanh", lt::tanh),         unary_case("sigmoid", lt::sigmoid, -4, 4),
      unary_case("relu", lt::relu),         unary_case("gelu", lt::gelu, -3, 3),
      unary_case("erf", lt::erf),           unary_case("silu", lt::silu, -4, 4),
      unary_case("sqrt", lt::sqrt, 0.2, 4), unary_case("rsqrt", lt::rsqrt, 0.2, 4),
      unary_case("abs", lt::abs),
  };
  auto bin = [&](std::string name, lt::Shape a, lt::Shape b, Fn f, double lo = -2, double hi = 2,
                 double blo = -2, double bhi = 2) {
    cases.push_back({name, {{a, lo, hi}, {b, blo, bhi}}, std::move(f)});
  };
  // broadcasting in both directions, and a 0-d operand
  for (auto [sa, sb] : std::vector<std::pair<lt::Shape, lt::Shape>>{
           {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 4}, {3, 1}}, {{}, {2, 2}}}) {
    std::string tag = "_";  // appended piecewise: g++ 12 warns falsely on a + chain here
    tag.append(sa.str()).append("x").append(sb.str());
    bin("add" + tag, sa, sb, [](const Ts& x) { return x[0] + x[1]; });
    bin("sub" + tag, sa, sb, [](const Ts& x) { return x[0] - x[1]; });
    bin("mul" + tag, sa, sb, [](const Ts& x) { return x[0] * x[1]; });
    bin(
        "div" + tag, sa, sb, [](const Ts& x) { return x[0] / x[1]; }, -2, 2, 0.5, 2);
    bin(
        "pow" + tag, sa, sb, [](const Ts& x) { return lt::pow(x[0], x[1]); }, 0.3, 2);
    bin("maximum" + tag, sa, sb, [](const Ts& x) { return lt::maximum(x[0], x[1]); });
    bin("minimum" + tag, sa, sb, [](const Ts& x) { return lt::minimum(x[0], x[1]); });
    bin("atan2" + tag, sa, sb, [](const Ts& x) { return lt::atan2(x[0], x[1]); });
    // away from the steps: a / b in (2.09, 2.8), a // b = 2 everywhere near the inputs
    bin(
        "remainder" + tag, sa, sb, [](const Ts& x) { return lt::remainder(x[0], x[1]); }, 2.2, 2.8,
        1.0, 1.05);
    bin(
        "floor_divide" + tag, sa, sb, [](const Ts& x) { return lt::floor_divide(x[0], x[1]); }, 2.2,
        2.8, 1.0, 1.05);
  }
  auto one = [&](std::string name, lt::Shape s, Fn f, double lo = -2, double hi = 2) {
    cases.push_back({name, {{s, lo, hi}}, std::move(f)});
  };
  one("add_number", {2, 3}, [](const Ts& x) { return 2.5 + x[0] + 1.5; });
  one(
      "div_number", {2, 3}, [](const Ts& x) { return 2.5 / x[0] - x[0] / 3.0; }, 0.5, 2);
  one("pow_number_exponent", {2, 3}, [](const Ts& x) { return lt::pow(x[0], 3.0); });
  one("pow_number_base", {2, 3}, [](const Ts& x) { return lt::pow(2.0, x[0]); });
  one("reused_operand", {2, 3}, [](const Ts& x) { return x[0] * x[0] + lt::exp(x[0]) * x[0]; });
  cases.push_back({"where", {{{2, 3}}, {{3}}, {{2, 1}}}, [](const Ts& x) {
                     return lt::where(x[0] > 0, x[1] * x[0], x[2]);
                   }});
  cases.push_back({"where_number", {{{2, 3}}}, [](const Ts& x) {
                     return lt::where(x[0] > 0, x[0], 0.5) + lt::where(x[0] < 1, 2.0, x[0]);
                   }});
  // reductions over one, several and all dims
  one("sum_all", {2, 3, 4}, [](const Ts& x) { return lt::sum(x[0]); });
  one("sum_dims_0_2", {2, 3, 4}, [](const Ts& x) { return lt::sum(x[0], {0, 2}); });
  one("sum_keepdim", {2, 3, 4}, [](const Ts& x) { return lt::sum(x[0], {-1, 1}, true); });
  one("mean_all", {2, 3, 4}, [](const Ts& x) { return lt::mean(x[0]); });
  one("mean_dims_1_2", {2, 3, 4}, [](const Ts& x) { return lt::mean(x[0], {1, 2}); });
  one("amax_all", {2, 3, 4}, [](const Ts& x) { return lt::amax(x[0]); });
  one("amax_dims_0_2", {2, 3, 4}, [](const Ts& x) { return lt::amax(x[0], {0, 2}, true); });
  one("softmax_last", {3, 5}, [](const Ts& x) { return lt::softmax(x[0]); });
  one("softmax_dim0", {3, 5}, [](const Ts& x) { return lt::softmax(x[0], 0); });
  one("log_softmax_last", {3, 5}, [](const Ts& x) { return lt::log_softmax(x[0]); });
  one("log_softmax_dim1_of_3d", {2, 3, 4}, [](const Ts& x) { return lt::log_softmax(x[0], 1); });
  // layout
  one("reshape", {2, 6}, [](const Ts& x) { return lt::reshape(x[0] * 1.5, {3, -1}); });
  one("reshape_leaf", {2, 6}, [](const Ts& x) { return lt::reshape(x[0], {4, 3}) * 2.0; });
  one("permute", {2, 3, 4}, [](const Ts& x) { return lt::permute(x[0], {2, 0, 1}) * 2.0; });
  one("transpose", {3, 4}, [](const Ts& x) { return lt::transpose(x[0]) * 2.0; });
  one("broadcast_to", {3, 1}, [](const Ts& x) { return lt::broadcast_to(x[0], {2, 3, 4}); });
  one("slice", {4, 5}, [](const Ts& x) { return lt::slice(x[0], 1, 1, 4); });
  one("slice_step", {7, 3}, [](const Ts& x) { return lt::slice(x[0], 0, 1, 7, 2); });
  one("slice_negative", {4, 5}, [](const Ts& x) { return lt::slice(x[0], -1, -3, 5); });
  one("select", {3, 4}, [](const Ts& x) { return lt::select(x[0], 1, 2); });
  one("unsqueeze_squeeze", {3, 4},
      [](const Ts& x) { return lt::squeeze(lt::unsqueeze(x[0], 1) * 2.0, 1); });
  cases.push_back({"concat", {{{2, 1}}, {{2, 3}}, {{2, 2}}}, [](const Ts& x) {
                     return lt::concat({x[0], x[1] * 2.0, x[2]}, 1);
                   }});
  cases.push_back({"stack", {{{2, 3}}, {{2, 3}}}, [](const Ts& x) {
                     return lt::stack({x[0], x[1]}, 1);
                   }});
  one("index_select_repeats", {4, 3}, [](const Ts& x) {
    return lt::index_select(x[0], 0, lt::tensor({2, 0, 2, 2, 3}));
  });
  one("index_select_dim1", {2, 4}, [](const Ts& x) {
    return lt::index_select(x[0], 1, lt::tensor(std::vector<int32_t>{3, 3, 1}, {3}));
  });
  cases.push_back({"index_add", {{{4, 3}}, {{5, 3}}}, [](const Ts& x) {
                     return lt::index_add(x[0], 0, lt::tensor({1, 3, 1, 0, 1}), x[1]) * x[0];
                   }});
  // matmul: plain, batched, broadcast batch dims, vectors
  bin("matmul", {3, 4}, {4, 2}, [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_batch", {2, 3, 4}, {2, 4, 5}, [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_broadcast_batch", {2, 1, 3, 4}, {3, 4, 2},
      [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_shared_weight", {2, 3, 4}, {4, 5},
      [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_vec_mat", {4}, {2, 4, 3}, [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_mat_vec", {2, 3, 4}, {4}, [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  bin("matmul_vec_vec", {4}, {4}, [](const Ts& x) { return lt::matmul(x[0], x[1]); });
  // composites that the nn layers are made of
  cases.push_back({"layer_norm_like", {{{3, 5}}, {{5}}}, [](const Ts& x) {
                     Tensor mu = lt::mean(x[0], {-1}, true);
                     Tensor c = x[0] - mu;
                     Tensor var = lt::mean(c * c, {-1}, true);
                     return c * lt::rsqrt(var + 1e-5) * x[1];
                   }});
  cases.push_back({"attention_like", {{{2, 4, 3}}, {{2, 4, 3}}}, [](const Ts& x) {
                     Tensor s = lt::matmul(x[0], lt::transpose(x[1])) * 0.5;
                     return lt::matmul(lt::softmax(s), x[1]);
                   }});
  one("clone_and_astype", {2, 3},
      [](const Ts& x) { return lt::astype(lt::clone(x[0]) * 2.0, lt::float64) + lt::clone(x[0]); });
  return cases;
}

TEST(GradCheck, EveryDifferentiableOpMatchesFiniteDifferences) {
  std::vector<GradCase> cases = grad_cases();
  EXPECT_GE(cases.size(), 80u);
  for (const GradCase& c : cases) check_gradients(c);
}

// The cast's gradient is the incoming gradient cast back: exact, so checked exactly (a
// finite difference through float32 rounding could not check it to 1e-6).
TEST(GradCheck, CastPassesTheGradientBackInTheInputDtype) {
  auto x = lt::tensor({1.5f, -2.0f, 0.25f}).requires_grad_();
  lt::sum(lt::astype(x, lt::float64) * lt::tensor({3.0, -0.5, 7.0})).backward();
  EXPECT_EQ(x.grad().dtype(), lt::float32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, -0.5f, 7}));
  auto y = lt::tensor({1.5, -2.0}).requires_grad_();
  lt::sum(lt::astype(y, lt::float16) * lt::tensor({2.0f, 0.125f})).backward();
  EXPECT_EQ(y.grad().dtype(), lt::float64);
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{2, 0.125}));
}

// Every differentiable op kind of ir/ops.def is recorded by some gradient case above (read
// off the cases' graphs), or is listed with the tests that check its gradient. A new op
// without a gradient case fails here.
TEST(GradCheck, EveryDifferentiableOpKindHasACase) {
  std::set<lt_test::OpKind> recorded;
  for (const GradCase& c : grad_cases()) {
    Ts xs;
    for (const In& in : c.inputs) xs.push_back(lt::zeros(in.shape, lt::float64).requires_grad_());
    lt_test::collect_ops(c.f(xs), recorded);
  }
  using K = lt_test::OpKind;
  const std::set<K> not_differentiable = {
      K::Data,  K::Scalar,       K::Param,        K::Iota,     K::RandUniform, K::RandNormal,
      K::Eq,    K::Ne,           K::Lt,           K::Le,       K::Gt,          K::Ge,
      K::AdamW, K::AdamWProduct, K::CheckTargets, K::Broadcast};
  const std::map<K, const char*> elsewhere = {
      {K::Cast, "GradCheck.CastPassesTheGradientBackInTheInputDtype"},
      {K::Call, "assume_pure_test (AssumePureGrad.*)"},
      {K::CallResult, "assume_pure_test, scan_test"},
      {K::Pack, "assume_pure_test (AssumePureGrad.*)"},
      {K::Loop, "scan_test, scan_layers_test (gradients through loops)"},
      {K::AllReduce, "dist_test (Collectives.GradientsAreThoseOfTheSumOfTheRanksLosses)"},
      {K::ReduceScatter, "dist_test (Collectives.GradientsAreThoseOfTheSumOfTheRanksLosses)"},
      {K::AllGather, "dist_test (Collectives.GradientsAreThoseOfTheSumOfTheRanksLosses)"},
  };
  lt_test::expect_covered(recorded, elsewhere, not_differentiable,
                          "gradient case: add one to grad_cases (or, if it is not "
                          "differentiable, to not_differentiable here)");
}

// ---- semantics

std::vector<float> values_of(const lt::Tensor& t) {
  return t.to_vector<float>();
}

TEST(Autograd, BackwardAccumulatesIntoLeavesAcrossCalls) {
  auto w = lt::tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  lt::sum(w * w).backward();  // 2w
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{2, 4, 6}));
  const lt::Tensor held = w.grad();
  lt::sum(w * 3.0f).backward();  // + 3, in place: a held .grad sees it, as in PyTorch
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(values_of(held), (std::vector<float>{5, 7, 9}));
  w.set_grad(lt::Tensor());  // zero_grad (set to none, PyTorch's default)
  EXPECT_FALSE(w.grad().defined());
  lt::sum(w).backward();
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{1, 1, 1}));
}

TEST(Autograd, GradientsAreLazyAndAStepIsOneGraph) {
  auto w = lt::tensor({0.5f, -1.0f}).requires_grad_();
  auto x = lt::tensor({2.0f, 3.0f});
  lt::sync();
  lt::metrics::reset();
  for (int step = 0; step < 5; ++step) {
    lt::Tensor loss = lt::sum(lt::tanh(w * x));
    loss.backward();
    EXPECT_TRUE(w.grad().is_pending());  // recorded, not run
    {
      lt::NoGradGuard no_grad;
      w.copy_(w - 0.1f * w.grad());
    }
    w.set_grad(lt::Tensor());
    lt::sync();
  }
  EXPECT_EQ(lt::metrics::counter("CompileCount"), 1);
  EXPECT_EQ(lt::metrics::counter("CacheHit"), 4);
  // the same five steps by hand
  double w0 = 0.5, w1 = -1.0;
  for (int step = 0; step < 5; ++step) {
    w0 -= 0.1 * 2.0 * (1 - std::pow(std::tanh(w0 * 2.0), 2));
    w1 -= 0.1 * 3.0 * (1 - std::pow(std::tanh(w1 * 3.0), 2));
  }
  std::vector<float> got = values_of(w);
  EXPECT_NEAR(got[0], w0, 1e-5);
  EXPECT_NEAR(got[1], w1, 1e-5);
}

TEST(Autograd, SyncBetweenForwardAndBackwardGivesTheSameGradient) {
  auto make = [] {
    return std::pair{lt::tensor(std::vector<double>{0.3, -1.2, 2.0, 0.7, -0.4, 1.1}, {2, 3}),
                     lt::tensor(std::vector<double>{1.5, -0.5, 0.25}, {3, 1})};
  };
  auto forward = [](const lt::Tensor& a, const lt::Tensor& b) {
    lt::Tensor h = lt::tanh(lt::matmul(a, b));
    return lt::sum(lt::softmax(h * a, 0) * lt::exp(a));
  };
  auto [a1, b1] = make();
  a1.requires_grad_();
  b1.requires_grad_();
  forward(a1, b1).backward();
  auto ga1 = a1.grad().to_vector<double>(), gb1 = b1.grad().to_vector<double>();

  auto [a2, b2] = make();
  a2.requires_grad_();
  b2.requires_grad_();
  lt::Tensor loss = forward(a2, b2);
  lt::sync();  // every saved tensor of the tape is computed and cut here
  EXPECT_FALSE(loss.is_pending());
  loss.backward();
  auto ga2 = a2.grad().to_vector<double>(), gb2 = b2.grad().to_vector<double>();
  ASSERT_EQ(ga1.size(), ga2.size());
  for (size_t i = 0; i < ga1.size(); ++i) EXPECT_NEAR(ga1[i], ga2[i], 1e-12);
  for (size_t i = 0; i < gb1.size(); ++i) EXPECT_NEAR(gb1[i], gb2[i], 1e-12);
}

TEST(Autograd, DetachAndNoGradStopTheTape) {
  auto w = lt::tensor({2.0f}).requires_grad_();
  lt::Tensor d = w.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  {
    lt::NoGradGuard no_grad;
    EXPECT_FALSE(lt::is_grad_enabled());
    EXPECT_FALSE((w * 2.0f).requires_grad());
    lt::EnableGradGuard again;
    EXPECT_TRUE((w * 2.0f).requires_grad());
  }
  EXPECT_TRUE(lt::is_grad_enabled());
  lt::Tensor y = w * w.detach();  // d/dw = w (the detached factor is a constant)
  EXPECT_FALSE(y.is_leaf());
  lt::sum(y).backward();
  EXPECT_FLOAT_EQ(w.grad().item<float>(), 2.0f);
}

TEST(Autograd, OnlyFloatingTensorsTakePartAndIntegerResultsCarryNoGrad) {
  auto w = lt::tensor({1.5f, -2.0f}).requires_grad_();
  EXPECT_FALSE((w > 0.0f).requires_grad());
  EXPECT_FALSE(lt::astype(w, lt::int32).requires_grad());
  EXPECT_TRUE(lt::astype(w, lt::float64).requires_grad());
  auto i = lt::tensor({1, 2});
  EXPECT_TRUE((i + w).requires_grad());  // promoted to float: it requires grad
}

TEST(Autograd, GradientsHaveTheLeafDtype) {
  auto h = lt::astype(lt::tensor({1.0f, 2.0f}), lt::float16).requires_grad_();
  auto f = lt::tensor({3.0f, 4.0f}).requires_grad_();
  lt::sum(h * f).backward();  // computed in float32; h's gradient comes back as float16
  EXPECT_EQ(h.grad().dtype(), lt::float16);
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(f.grad().to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(Autograd, BackwardWithAGradientAndRetainGraph) {
  auto w = lt::tensor({1.0f, 2.0f}).requires_grad_();
  lt::Tensor y = w * w;
  y.backward(lt::tensor({1.0f, 10.0f}), /*retain_graph=*/true);
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{2, 40}));
  y.backward(lt::tensor({1.0f, 1.0f}));
  EXPECT_EQ(values_of(w.grad()), (std::vector<float>{4, 44}));
}

TEST(Autograd, FunctionalGradDoesNotTouchGradAndGivesZerosForUnusedInputs) {
  auto a = lt::tensor({1.0f, 2.0f}).requires_grad_();
  auto b = lt::tensor({5.0f}).requires_grad_();
  auto gs = lt::autograd::grad({lt::sum(a * a)}, {a, b});
  EXPECT_EQ(values_of(gs[0]), (std::vector<float>{2, 4}));
  EXPECT_EQ(values_of(gs[1]), (std::vector<float>{0}));
  EXPECT_FALSE(a.grad().defined());
}

TEST(Autograd, GradientOfAnIntermediateTensor) {
  auto x = lt::tensor({1.0f, 2.0f}).requires_grad_();
  lt::Tensor h = x * 3.0f;
  lt::Tensor loss = lt::sum(h * h);
  auto gs = lt::autograd::grad({loss}, {h, x});
  EXPECT_EQ(values_of(gs[0]), (std::vector<float>{6, 12}));   // 2h
  EXPECT_EQ(values_of(gs[1]), (std::vector<float>{18, 36}));  // 2h * 3
}

// grad_outputs weigh each output: d(v1 . x^2 + v2 . sin x)/dx, against the formula.
TEST(Autograd, GradOutputsWeighEachOutput) {
  const std::vector<double> xs = {0.3, -1.2, 2.0}, v1 = {1.0, -2.0, 0.5}, v2 = {3.0, 0.25, -1.0};
  auto x = lt::tensor(xs, {3}).requires_grad_();
  auto g = lt::autograd::grad({x * x, lt::sin(x)}, {x}, {lt::tensor(v1, {3}), lt::tensor(v2, {3})});
  const std::vector<double> got = g[0].to_vector<double>();
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(got[i], v1[i] * 2 * xs[i] + v2[i] * std::cos(xs[i]), 1e-14) << i;
  EXPECT_FALSE(x.grad().defined()) << "grad() returns the gradients; no grad() changes";
  expect_error([&] { (void)lt::autograd::grad({x * x}, {x}, {lt::ones({2}, lt::float64)}); },
               {"[grad]", "[2]", "[3]"});
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  auto x = lt::tensor({3.0}).requires_grad_();
  lt::Tensor y = x * x * x;  // dy = 3x^2 = 27, d2y = 6x = 18, d3y = 6
  auto g = lt::autograd::grad({y}, {x}, {}, {.create_graph = true});
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 27.0);
  ASSERT_TRUE(g[0].requires_grad());
  auto g2 = lt::autograd::grad({g[0]}, {x}, {}, {.create_graph = true});
  EXPECT_DOUBLE_EQ(g2[0].item<double>(), 18.0);
  auto g3 = lt::autograd::grad({g2[0]}, {x});
  EXPECT_DOUBLE_EQ(g3[0].item<double>(), 6.0);
}

// Ops whose VJP reads their own result (exp, tanh, sigmoid, sqrt, div, pow, softmax,
// log_softmax) give it back its history in a create_graph backward: the second derivative
// against central differences of the first in float64 (it was 0 for exp, tanh, softmax).
TEST(Autograd, SecondDerivativesThroughOpsThatReadTheirResult) {
  using F = std::function<lt::Tensor(const lt::Tensor&)>;
  const std::vector<std::pair<const char*, F>> cases = {
      {"exp", [](const lt::Tensor& x) { return lt::exp(x); }},
      {"tanh", [](const lt::Tensor& x) { return lt::tanh(x); }},
      {"sigmoid", [](const lt::Tensor& x) { return lt::sigmoid(x); }},
      {"sqrt", [](const lt::Tensor& x) { return lt::sqrt(x); }},
      {"rsqrt", [](const lt::Tensor& x) { return lt::rsqrt(x); }},
      {"div", [](const lt::Tensor& x) { return 1.0 / x; }},
      {"pow", [](const lt::Tensor& x) { return lt::pow(x, x); }},
      {"softmax",
       [](const lt::Tensor& x) { return lt::softmax(x, 0) * lt::arange(1, 4, 1, lt::float64); }},
      {"log_softmax",
       [](const lt::Tensor& x) {
         return lt::log_softmax(x, 0) * lt::arange(1, 4, 1, lt::float64);
       }},
  };
  const std::vector<double> at = {0.7, 1.3, 0.4};
  // the gradient of sum(f(x)) at v, as doubles
  auto first = [](const F& f, const std::vector<double>& v, bool create) {
    lt::Tensor x = lt::tensor(v, {3}).requires_grad_();
    return std::make_pair(
        x, lt::autograd::grad({lt::sum(f(x))}, {x}, {}, {.create_graph = create})[0]);
  };
  for (const auto& [name, f] : cases) {
    auto [x, g] = first(f, at, true);
    ASSERT_TRUE(g.requires_grad()) << name;
    // d/dx of sum(g * w): the Hessian times w, against differences of the first derivative
    const std::vector<double> w = {0.5, -1.0, 2.0};
    const std::vector<double> hv =
        lt::autograd::grad({lt::sum(g * lt::tensor(w, {3}))}, {x})[0].to_vector<double>();
    for (size_t i = 0; i < at.size(); ++i) {
      const double h = 1e-6;
      std::vector<double> up = at, down = at;
      up[i] += h;
      down[i] -= h;
      const std::vector<double> gu = first(f, up, false).second.to_vector<double>(),
                                gd = first(f, down, false).second.to_vector<double>();
      double want = 0;
      for (size_t j = 0; j < at.size(); ++j) want += w[j] * (gu[j] - gd[j]) / (2 * h);
      EXPECT_NEAR(hv[i], want, 1e-6 * std::max(1.0, std::abs(want))) << name << "[" << i << "]";
    }
  }
}

// autograd::grad as torch's: an input listed twice gets its gradient in both places; only
// what lies between the outputs and the inputs runs, so a graph below an intermediate
// input stays for a later backward; a write under NoGradGuard keeps a tensor's history.
TEST(Autograd, GradOfRepeatedAndIntermediateInputsAndNoGradWrites) {
  auto x = lt::tensor({1.0, 2.0}).requires_grad_();
  auto twice = lt::autograd::grad({lt::sum(x * x)}, {x, x});
  EXPECT_EQ(twice[0].to_vector<double>(), (std::vector<double>{2, 4}));
  EXPECT_EQ(twice[1].to_vector<double>(), (std::vector<double>{2, 4}));
  lt::Tensor h = x * x;
  auto dh = lt::autograd::grad({lt::sum(h * 3.0)}, {h, h});
  EXPECT_EQ(dh[0].to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_EQ(dh[1].to_vector<double>(), (std::vector<double>{3, 3}));
  lt::sum(h * h).backward();  // d/dx of x^4: the graph below h was not run nor freed
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 32}));
  x.set_grad(lt::Tensor());
  lt::Tensor k = x * 2.0;
  {
    lt::NoGradGuard no_grad;
    k.copy_(k + 1.0);
  }
  ASSERT_TRUE(k.requires_grad());
  lt::sum(k * 3.0 + x * x).backward();  // as torch: 3 * 2 + 2x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{8, 10}));
}

TEST(Autograd, CopyIntoANonLeafRoutesTheGradientToTheSource) {
  auto a = lt::tensor({1.0f, 2.0f}).requires_grad_();
  auto b = lt::tensor({3.0f, 4.0f}).requires_grad_();
  lt::Tensor h = a * 2.0f;
  h.copy_(b * b);  // h's old value (from a) no longer matters
  lt::sum(h).backward();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(values_of(b.grad()), (std::vector<float>{6, 8}));
  // a constant overwritten by a tensor with history gets that history
  lt::Tensor c = lt::zeros({2});
  c.copy_(a * 5.0f);
  EXPECT_TRUE(c.requires_grad());
  lt::sum(c).backward();
  EXPECT_EQ(values_of(a.grad()), (std::vector<float>{5, 5}));
}

// An op's gradient that reads an input copy_ overwrote after the op used it would read the
// new value (it did: x.grad was -1s here); it is an error, as in PyTorch. A gradient that does
// not read the overwritten input is unaffected, and so are ops that read their own result.
TEST(Autograd, AGradientReadingAnInputOverwrittenByCopyIsAnError) {
  auto x = lt::tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  lt::Tensor w = lt::tensor({10.0f, 20.0f, 30.0f});
  lt::Tensor y = lt::sum(x * w);
  w.copy_(lt::tensor({-1.0f, -1.0f, -1.0f}));
  expect_error([&] { y.backward(); },
               "[backward] the gradient of mul reads its input f32[3], which copy_ overwrote "
               "after mul used it");
  for (auto op : {+[](const lt::Tensor& a) { return lt::log(a); },
                  +[](const lt::Tensor& a) { return lt::amax(a); },
                  +[](const lt::Tensor& a) { return lt::matmul(a, a); }}) {
    lt::Tensor v = lt::tensor({1.0f, 2.0f}).requires_grad_();
    lt::Tensor u = v * 1.0f;
    lt::Tensor out = lt::sum(op(u));
    u.copy_(lt::tensor({5.0f, 6.0f}));
    EXPECT_THROW(out.backward(), lt::Error);
  }
  // exp's gradient reads its result only, add's neither operand: right whatever the input
  // holds now
  auto e = lt::tensor({0.0f, 1.0f}).requires_grad_();
  lt::Tensor e1 = e * 1.0f;
  lt::Tensor es = lt::sum(lt::exp(e1));
  e1.copy_(lt::tensor({5.0f, 6.0f}));
  es.backward();
  EXPECT_NEAR(e.grad().to_vector<float>()[1], std::exp(1.0f), 1e-6);
  auto z = lt::tensor({1.0f, 2.0f}).requires_grad_();
  lt::Tensor c = lt::tensor({3.0f, 4.0f});
  lt::Tensor s = lt::sum(z + c);
  c.copy_(lt::tensor({0.0f, 0.0f}));
  s.backward();
  EXPECT_EQ(values_of(z.grad()), (std::vector<float>{1, 1}));
  // a leaf's update under NoGradGuard after backward (an optimizer step) is no write to check
  auto p = lt::tensor({2.0f}).requires_grad_();
  for (int step = 0; step < 2; ++step) {
    lt::sum(p * p).backward();
    lt::NoGradGuard no_grad;
    p.copy_(p - 0.25f * p.grad());
    p.set_grad(lt::Tensor());
  }
  EXPECT_FLOAT_EQ(p.item<float>(), 0.5f);  // 2 -> 1 -> 0.5
}

TEST(Autograd, ALongTapeIsReleasedAndRunWithoutDeepRecursion) {
  auto w = lt::tensor({1.0f}).requires_grad_();
  lt::Tensor y = w;
  for (int i = 0; i < 20000; ++i) y = y * 1.0001f + 0.0001f;
  lt::sum(y).backward();
  EXPECT_NEAR(w.grad().item<float>(), std::pow(1.0001, 20000), 1e-2);
  y = lt::Tensor();
  lt::Tensor z = w;
  for (int i = 0; i < 20000; ++i) z = z * 1.0f;
  z = lt::Tensor();  // the tape is dropped without ever running backward
  SUCCEED();
}

// custom_function: a hand-written backward (here softplus's, reading its input, and a
// second output's, reading that output) against the derivative in double, first and second.
TEST(Autograd, CustomFunctionUsesItsBackwardAndIsDifferentiableAgain) {
  const std::vector<double> xs = {-1.5, 0.25, 2.0};
  auto apply = [](const lt::Tensor& x) {
    lt::Tensor y, e;
    {
      lt::NoGradGuard no_grad;
      y = lt::log1p(lt::exp(x));  // softplus
      e = lt::exp(x);
    }
    return lt::autograd::custom_function(
        "softplus_exp", {x}, {y, e}, [x](const Ts& g, const Ts& out) {
          return Ts{g[0] * lt::sigmoid(x) + g[1] * out[1]};  // exp' = exp: reads its output
        });
  };
  lt::Tensor x = lt::tensor(xs, {3}).requires_grad_();
  Ts out = apply(x);
  lt::Tensor loss = lt::sum(out[0]) + lt::sum(out[1] * 0.5);
  Ts g = lt::autograd::grad({loss}, {x}, {}, {.create_graph = true});
  Ts gg = lt::autograd::grad({lt::sum(g[0])}, {x});
  for (size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xs[i])), e = std::exp(xs[i]);
    EXPECT_NEAR(g[0].to_vector<double>()[i], s + 0.5 * e, 1e-12);
    EXPECT_NEAR(gg[0].to_vector<double>()[i], s * (1 - s) + 0.5 * e, 1e-12);
  }
  // an unused output's gradient reaches backward as zeros; no grad mode: no history
  lt::Tensor x2 = lt::tensor(xs, {3}).requires_grad_();
  lt::sum(apply(x2)[1]).backward();
  EXPECT_NEAR(x2.grad().to_vector<double>()[1], std::exp(0.25), 1e-12);
  {
    lt::NoGradGuard no_grad;
    EXPECT_FALSE(apply(x2)[0].requires_grad());
  }
  lt::Tensor bad = lt::autograd::custom_function(
      "bad", {x2}, {lt::sum(x2.detach())}, [](const Ts& g, const Ts&) { return Ts{g[0]}; })[0];
  expect_error([&] { bad.backward(); },
               "[bad] backward's gradient 0 has shape [] but input 0 has shape [3]");
  lt::Tensor two =
      lt::autograd::custom_function("two", {x2}, {x2.detach()}, [](const Ts& g, const Ts&) {
        return Ts{g[0], g[0]};
      })[0];
  expect_error([&] { lt::sum(two).backward(); },
               "[two] backward returned 2 gradients for 1 inputs");
}

TEST(AutogradErrors, EachMistakeGetsAClearError) {
  expect_error(
      [] {
        lt::tensor({1, 2}).requires_grad_();
      },
      "[requires_grad_] only floating tensors can require gradients; got i64[2]");
  expect_error([] { lt::tensor({true}).requires_grad_(); }, "got bool[1]");
  expect_error(
      [] {
        (lt::tensor({1.0f, 2.0f}) * 2.0f).backward();
      },
      "[backward] a gradient can be implied only for a one-element tensor, got f32[2]");
  expect_error([] { lt::sum(lt::tensor({1.0f})).backward(); }, "does not require grad");
  expect_error(
      [] {
        auto w = lt::tensor({1.0f}).requires_grad_();
        lt::Tensor y = lt::sum(w * w);
        y.backward();
        y.backward();
      },
      "was already freed by an earlier backward; pass retain_graph = true");
  expect_error(
      [] {
        auto w = lt::tensor({1.0f, 2.0f}).requires_grad_();
        (w * 2.0f).backward(lt::tensor({1.0f, 2.0f, 3.0f}));
      },
      "[backward] gradient 0 has shape [3] but its tensor has shape [2]");
  expect_error(
      [] {
        auto w = lt::tensor({1.0f}).requires_grad_();
        w.copy_(lt::tensor({2.0f}));
      },
      "[copy_] a leaf tensor that requires grad (f32[1]) cannot be written in place");
  expect_error(
      [] {
        auto w = lt::tensor({1.0f}).requires_grad_();
        (w * 2.0f).requires_grad_(false);
      },
      "cannot stop requiring grad; use detach()");
  expect_error([] { lt::autograd::grad({lt::tensor({1.0f})}, {lt::tensor({1.0f})}); },
               "[grad] input 0 (f32[1]) does not require grad");
  expect_error(
      [] {
        auto w = lt::tensor({1.0f}).requires_grad_();
        w.set_grad(lt::tensor({1.0, 2.0}));
      },
      "[set_grad] the gradient f64[2] must have the tensor's type f32[1]");
  // a leaf may be updated in place without grad mode, and still requires grad after
  auto w = lt::tensor({1.0f}).requires_grad_();
  {
    lt::NoGradGuard no_grad;
    w.copy_(w * 3.0f);
  }
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FLOAT_EQ(w.item<float>(), 3.0f);
}

}  // namespace
