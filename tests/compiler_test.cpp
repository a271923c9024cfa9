// The compiler's plan: fusion, views, buffer planning, and the edge cases that once broke it.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(Compiler, AnElementwiseChainIsOneFusedStep) {
  auto x = lt::randn({300, 500});
  lt::sync();
  auto y = lt::relu(lt::tanh(x * 2.0f + 1.0f) - 0.5f) * x + lt::sigmoid(x);
  std::string plan = lt::debug::to_program({y});
  EXPECT_EQ(count(plan, "fused"), 1) << plan;
  EXPECT_NE(plan.find("arena 0 bytes"), std::string::npos) << plan;  // no intermediate buffer
  auto xv = x.to_vector<float>();
  auto yv = y.to_vector<float>();
  for (size_t i = 0; i < xv.size(); i += 997) {
    double v = xv[i], t = std::tanh(v * 2 + 1) - 0.5;
    double ref = (t > 0 ? t : 0) * v + 1 / (1 + std::exp(-v));
    ASSERT_NEAR(yv[i], ref, 1e-5 * (1 + std::abs(ref)));
  }
}

TEST(Compiler, LayoutOpsAreViewsNotCopies) {
  auto x = lt::randn({8, 16});
  lt::sync();
  auto y = lt::transpose(lt::slice(x, 1, 2, 14, 3), 0, 1) * 2.0f;  // [4, 8], strided read
  std::string plan = lt::debug::to_program({y});
  EXPECT_EQ(count(plan, "fused"), 1) << plan;
  auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(yv[i * 8 + j], 2 * xv[j * 16 + 2 + 3 * i]);
}

TEST(Compiler, IntermediatesShareArenaSpace) {
  auto x = lt::randn({64, 64});
  auto w = lt::randn({64, 64});
  lt::sync();
  lt::Tensor h = x;
  for (int i = 0; i < 6; ++i) h = lt::tanh(lt::matmul(h, w));
  std::string plan = lt::debug::to_program({h});
  // six 16 KiB matmul results, never more than two live at once
  auto pos = plan.find("arena ");
  ASSERT_NE(pos, std::string::npos);
  long arena = std::stol(plan.substr(pos + 6));
  EXPECT_LE(arena, 2 * 64 * 64 * 4 + 256) << plan;
}

// A reference product in float64: A [m, k] times B [k, n], row-major.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int m, int k,
                            int n) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j)
        c[static_cast<size_t>(i * n + j)] +=
            double(a[static_cast<size_t>(i * k + p)]) * double(b[static_cast<size_t>(p * n + j)]);
  return c;
}

// Adjacent products of the same input with nothing between them (a layer's gate and up
// projections) run side by side; a product of the other's output, or one whose output
// takes the arena bytes of what the other reads, never does.
TEST(Compiler, IndependentAdjacentProductsRunSideBySide) {
  const int m = 16, k = 128, n = 256;
  auto x = lt::randn({m, k}), w1 = lt::randn({k, n}), w2 = lt::randn({k, n});
  lt::sync();
  const auto xv = x.to_vector<float>(), w1v = w1.to_vector<float>(), w2v = w2.to_vector<float>();
  const std::vector<double> g = product(xv, w1v, m, k, n), u = product(xv, w2v, m, k, n);
  lt::Tensor y = lt::matmul(x, w1) * lt::matmul(x, w2);
  std::string plan = lt::debug::to_program({y});
  EXPECT_EQ(count(plan, "beside the next"), 1) << plan;
  const auto yv = y.to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i)
    ASSERT_NEAR(yv[i], g[i] * u[i], 1e-4 * (1 + std::abs(g[i] * u[i]))) << i;

  // the second product reads the first's output
  auto sq = lt::randn({n, n});
  lt::sync();
  lt::Tensor chain = lt::matmul(lt::matmul(x, w1), sq);
  EXPECT_EQ(count(lt::debug::to_program({chain}), "beside the next"), 0);

  // the first product's input is dead after it, and the second's output may take its bytes
  auto v = lt::randn({k, k}), v2 = lt::randn({k, k});
  lt::sync();
  const auto vv = v.to_vector<float>(), v2v = v2.to_vector<float>();
  lt::Tensor doubled = x * 2.0f;
  lt::Tensor z = lt::matmul(doubled, v) + lt::matmul(x, v2);
  plan = lt::debug::to_program({z});
  EXPECT_EQ(count(plan, "beside the next"), 0) << plan;
  const auto zv = z.to_vector<float>();
  std::vector<float> x2(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) x2[i] = 2.0f * xv[i];
  const std::vector<double> p1 = product(x2, vv, m, k, k), p2 = product(xv, v2v, m, k, k);
  for (size_t i = 0; i < zv.size(); ++i)
    ASSERT_NEAR(zv[i], p1[i] + p2[i], 1e-4 * (1 + std::abs(p1[i] + p2[i]))) << i << "\n" << plan;
}

// A product with few rows and a long reduction is computed in parts of the reduction, one
// per thread, then summed: x Wᵀ (B read along k) and dY W (B read along n).
TEST(Compiler, ALongReductionInPartsMatchesAFloat64Loop) {
  const int m = 16, k = 2048, n = 64;
  auto x = lt::randn({m, k}), w = lt::randn({n, k}), v = lt::randn({k, n});
  lt::sync();
  const auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), vv = v.to_vector<float>();
  std::vector<float> wt(wv.size());  // w transposed, [k, n]
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      wt[static_cast<size_t>(p * n + j)] = wv[static_cast<size_t>(j * k + p)];
  const std::vector<double> want_t = product(xv, wt, m, k, n), want = product(xv, vv, m, k, n);
  const auto got_t = lt::matmul(x, lt::transpose(w, 0, 1)).to_vector<float>();
  const auto got = lt::matmul(x, v).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got_t[i], want_t[i], 1e-3 * (1 + std::abs(want_t[i]))) << i;
    ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << i;
  }
}

// Regression: a concat whose producer group was also joined by a reader of the concat
// read the concat's memory before writing it.
TEST(Compiler, ConcatWithAnEmptyPartnerThenElementwise) {
  auto x = lt::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto a = lt::exp(x);
  auto c = lt::concat({lt::zeros({0, 3}), a});
  auto b = a * c;
  auto got = b.to_vector<float>();
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got[i], std::exp(2.0 * (i + 1)), 1e-3 * std::exp(2.0 * (i + 1)));
}

// Regression: an empty batch dim made matmul write past its output.
TEST(Compiler, ABatchOfRowsTimesASharedMatrixIsOneGemm) {
  auto x = lt::randn({3, 5, 4});  // a Linear layer's input: [batch, seq, features]
  auto w = lt::randn({6, 4});
  lt::sync();
  auto y = lt::matmul(x, lt::transpose(w));
  std::string plan = lt::debug::to_program({y});
  EXPECT_EQ(count(plan, "matmul"), 1) << plan;
  EXPECT_NE(plan.find("[15, 6]"), std::string::npos) << plan;  // rows folded: 3 * 5
  auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), yv = y.to_vector<float>();
  for (int r = 0; r < 15; ++r)
    for (int o = 0; o < 6; ++o) {
      double ref = 0;
      for (int k = 0; k < 4; ++k) ref += double(xv[r * 4 + k]) * wv[o * 4 + k];
      ASSERT_NEAR(yv[r * 6 + o], ref, 1e-5) << r << " " << o;
    }
  // a strided batch (every other row block) cannot fold and still multiplies correctly
  auto base = lt::randn({6, 5, 4});
  lt::sync();
  auto xs = lt::slice(base, 0, 0, 6, 2);  // a view: rows step unevenly across batches
  auto ys = lt::matmul(xs, lt::transpose(w));
  EXPECT_EQ(lt::debug::to_program({ys}).find("[15, 6]"), std::string::npos);
  auto xsv = xs.to_vector<float>(), ysv = ys.to_vector<float>();
  for (int r = 0; r < 15; ++r)
    for (int o = 0; o < 6; ++o) {
      double ref = 0;
      for (int k = 0; k < 4; ++k) ref += double(xsv[r * 4 + k]) * wv[o * 4 + k];
      ASSERT_NEAR(ysv[r * 6 + o], ref, 1e-5) << r << " " << o;
    }
}

// A weight's gradient, x^T dy read through the transpose's VJP, is computed as dy^T x into
// the weight's layout: no strided copy after the product.
TEST(Compiler, TransposedProductIsComputedTransposed) {
  auto x = lt::randn({5, 4}), dy = lt::randn({5, 6});
  lt::sync();
  auto g = lt::transpose(lt::matmul(lt::transpose(x), dy));  // [6, 4]
  const std::string plan = lt::debug::to_program({g});
  EXPECT_EQ(plan.find("fused"), std::string::npos) << plan;
  EXPECT_NE(plan.find("[6, 4]"), std::string::npos) << plan;
  auto xv = x.to_vector<float>(), dv = dy.to_vector<float>(), gv = g.to_vector<float>();
  for (int o = 0; o < 6; ++o)
    for (int k = 0; k < 4; ++k) {
      double ref = 0;
      for (int r = 0; r < 5; ++r) ref += double(dv[r * 6 + o]) * xv[r * 4 + k];
      ASSERT_NEAR(gv[o * 4 + k], ref, 1e-5) << o << " " << k;
    }
  // read twice (the product itself too): computed as written, then transposed
  auto p = lt::matmul(lt::transpose(x), dy);
  auto both = lt::transpose(p) + 0.5;
  auto pv = p.to_vector<float>(), bv = both.to_vector<float>();
  for (int o = 0; o < 6; ++o)
    for (int k = 0; k < 4; ++k) ASSERT_NEAR(bv[o * 4 + k], pv[k * 6 + o] + 0.5, 1e-5);
}

TEST(Compiler, MatmulWithAnEmptyBatch) {
  auto y = lt::matmul(lt::zeros({0, 4, 5}), lt::ones({5, 3}));
  EXPECT_EQ(y.shape(), (lt::Shape{0, 4, 3}));
  EXPECT_TRUE(y.to_vector<float>().empty());
  auto z = lt::matmul(lt::ones({2, 0}), lt::ones({0, 3}));  // k == 0: zeros
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
}

// Regression: walking an empty shape divided by zero.
TEST(Compiler, ReductionsAndGathersOverEmptyTensors) {
  EXPECT_EQ(lt::sum(lt::zeros({0, 3})).item<float>(), 0.0f);
  EXPECT_EQ(lt::sum(lt::zeros({0, 3}), {0}).to_vector<float>(), std::vector<float>(3, 0.0f));
  auto g = lt::index_select(lt::zeros({3, 0}), 0, lt::tensor({0, 1}));
  EXPECT_EQ(g.shape(), (lt::Shape{2, 0}));
  EXPECT_TRUE(g.to_vector<float>().empty());
}

TEST(Compiler, ResultsThatAreViewsOfInputsShareOrCopyCorrectly) {
  auto x = lt::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto same = lt::reshape(x * 1.0f, {3, 2});  // x*1 simplifies to x: a reshape of a parameter
  auto t = lt::transpose(x);                  // a strided view: copied into its own buffer
  lt::sync();
  EXPECT_EQ(same.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Compiler, SimplifyKeepsTheSignOfZero) {
  // -0 + 0 is +0 (IEEE 754, NumPy, PyTorch): x + 0.0 is not x; x + -0.0 and x - 0.0 are
  const lt::Tensor z = lt::tensor({-0.0f, 1.5f});
  for (const auto& [y, negative] : {std::pair{z + 0.0f, false},
                                    {0.0f + z, false},
                                    {z + -0.0f, true},
                                    {z - 0.0f, true},
                                    {z * 1.0f, true}}) {
    const std::vector<float> v = y.to_vector<float>();
    EXPECT_EQ(std::signbit(v[0]), negative);
    EXPECT_EQ(v[1], 1.5f);
  }
}

TEST(Compiler, BadShapesAreErrorsNotHangs) {
  EXPECT_THROW((void)lt::broadcast_to(lt::scalar(1.0f), {-1, -1}), lt::Error);
  auto s = lt::slice(lt::arange(10), 0, 1, 10, INT64_MAX);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{1}));
}

}  // namespace
