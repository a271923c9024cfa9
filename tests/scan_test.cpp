// scan: the spec's examples, every case against an unrolled loop of the same function
// (values and gradients, both remat policies, reverse), traced and compiled once, errors.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <random>
#include <string>

#include "expect_error.h"

namespace {

using lt::Tensor;
using lt::Tree;

[[maybe_unused]] int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

Tensor random_tensor(const lt::Shape& shape, uint64_t seed, lt::DType dtype = lt::DType::float32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = n(rng);
  return lt::astype(lt::tensor(v, shape), dtype);
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], tol * (1 + std::fabs(y[i]))) << what << " element " << i;
}

TEST(Scan, SpecCumulativeSum) {
  auto cumsum = [](const Tensor& accumulated, const Tensor& element) {
    Tensor a = accumulated + element;
    return std::pair{a, a};
  };
  Tensor init = lt::tensor({0.0f});
  Tensor xs = lt::tensor({1.0f, 2.0f, 3.0f});
  auto [final, result] = lt::scan(cumsum, init, xs);
  EXPECT_EQ(final.shape(), lt::Shape({1}));
  EXPECT_EQ(final.to_vector<float>(), std::vector<float>({6}));
  EXPECT_EQ(result.shape(), lt::Shape({3, 1}));
  EXPECT_EQ(result.to_vector<float>(), std::vector<float>({1, 3, 6}));
}

TEST(Scan, SpecDictCarry) {
  Tree carry = Tree::dict({{"sum", lt::tensor({0.0f})}, {"count", lt::tensor({0.0f})}});
  Tree xs = Tree::dict({{"values", lt::arange(1, 6, 1, lt::DType::float32)}});
  auto fn = [](const Tree& c, const Tree& x) {
    Tensor new_sum = c["sum"].tensor() + x["values"].tensor();
    Tensor new_count = c["count"].tensor() + 1.0;
    Tree new_carry = Tree::dict({{"sum", new_sum}, {"count", new_count}});
    Tensor running_mean = new_sum / new_count;
    return std::pair{new_carry, Tree(running_mean)};
  };
  auto [final_carry, means] = lt::scan(fn, carry, xs);
  EXPECT_EQ(final_carry["sum"].tensor().to_vector<float>(), std::vector<float>({15}));
  EXPECT_EQ(final_carry["count"].tensor().to_vector<float>(), std::vector<float>({5}));
  // running means of 1..5: 1, 1.5, 2, 2.5, 3
  EXPECT_EQ(means.tensor().shape(), lt::Shape({5, 1}));
  EXPECT_EQ(means.tensor().to_vector<float>(), std::vector<float>({1, 1.5, 2, 2.5, 3}));
}


// ---- against an unrolled loop of the same function

std::vector<Tensor> floating_leaves(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts)
    if (lt::is_floating(t.dtype())) out.push_back(t);
  return out;
}

// The sum of every floating leaf, in float32: the loss whose gradients are compared.
Tensor total(const std::vector<Tensor>& leaves) {
  Tensor s = lt::tensor({0.0f});
  for (const Tensor& t : floating_leaves(leaves)) s = s + lt::astype(lt::sum(t), lt::DType::float32);
  return s;
}

// Runs fn as a plain C++ loop over the slices of xs; returns (carry, stacked ys) leaves.
template <typename F, typename C, typename X>
std::pair<std::vector<Tensor>, std::vector<Tensor>> unrolled(const F& fn, const C& init, const X& xs,
                                                             bool reverse) {
  namespace pt = lt::pytree;
  std::vector<Tensor> xl = pt::flatten(xs).tensors();
  const int64_t n = xl[0].shape()[0];
  C c = init;
  std::vector<std::vector<Tensor>> ys(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = reverse ? n - 1 - j : j;
    std::vector<Tensor> slice;
    for (const Tensor& t : xl) slice.push_back(lt::select(t, 0, i));
    pt::Cursor cur{slice};
    X x = pt::Traits<X>::rebuild(xs, cur);
    auto [nc, y] = fn(c, x);
    c = nc;
    ys[static_cast<size_t>(i)] = pt::flatten(y).tensors();
  }
  std::vector<Tensor> stacked;
  if (n > 0)
    for (size_t k = 0; k < ys[0].size(); ++k) {
      std::vector<Tensor> parts;
      for (const auto& row : ys) parts.push_back(row[k]);
      stacked.push_back(lt::stack(parts));
    }
  return {pt::flatten(c).tensors(), stacked};
}

// scan(fn) equals the unrolled loop: final carry, ys, and the gradients of the sum of all
// their leaves with respect to init, xs and `closed` (tensors fn closes over).
template <typename F, typename C, typename X>
void check_scan(const F& fn, const C& init, const X& xs, const std::vector<Tensor>& closed,
                lt::ScanOptions opts, double tol, const std::string& what) {
  namespace pt = lt::pytree;
  std::vector<Tensor> wrt = floating_leaves(pt::flatten(init).tensors());
  for (const Tensor& t : floating_leaves(pt::flatten(xs).tensors())) wrt.push_back(t);
  for (const Tensor& t : closed) wrt.push_back(t);
  for (Tensor t : wrt) t.requires_grad_();

  auto [rc, ry] = unrolled(fn, init, xs, opts.reverse);
  std::vector<Tensor> ref_all = rc;
  ref_all.insert(ref_all.end(), ry.begin(), ry.end());
  std::vector<Tensor> ref_grads = lt::autograd::grad({total(ref_all)}, wrt);

  auto [carry, ys] = lt::scan(fn, init, xs, opts);
  std::vector<Tensor> sc = pt::flatten(carry).tensors(), sy = pt::flatten(ys).tensors();
  ASSERT_EQ(sc.size(), rc.size()) << what;
  for (size_t i = 0; i < sc.size(); ++i) expect_close(sc[i], rc[i], tol, what + ": carry " + std::to_string(i));
  if (!ry.empty()) {
    ASSERT_EQ(sy.size(), ry.size()) << what;
    for (size_t i = 0; i < sy.size(); ++i) expect_close(sy[i], ry[i], tol, what + ": ys " + std::to_string(i));
  }
  std::vector<Tensor> all = sc;
  all.insert(all.end(), sy.begin(), sy.end());
  std::vector<Tensor> grads = lt::autograd::grad({total(all)}, wrt);
  for (size_t i = 0; i < wrt.size(); ++i)
    expect_close(grads[i], ref_grads[i], tol, what + ": gradient " + std::to_string(i));
}

const lt::ScanOptions kPolicies[] = {
    {.reverse = false, .is_fn_pure = false, .remat = lt::Remat::save},
    {.reverse = false, .is_fn_pure = false, .remat = lt::Remat::recompute},
    {.reverse = true, .is_fn_pure = false, .remat = lt::Remat::save},
    {.reverse = true, .is_fn_pure = false, .remat = lt::Remat::recompute},
};

std::string policy_name(const lt::ScanOptions& o) {
  return std::string(o.reverse ? "reverse " : "") +
         (o.remat == lt::Remat::save ? "save" : "recompute");
}

TEST(Scan, RnnCellWithClosedOverWeights) {
  Tensor w = random_tensor({4, 4}, 1), b = random_tensor({4}, 2);
  auto fn = [&](const Tensor& h, const Tensor& x) {
    Tensor nh = lt::tanh(lt::matmul(h, w) + x * b);
    return std::pair{nh, nh * nh + x};
  };
  for (const auto& o : kPolicies)
    check_scan(fn, random_tensor({3, 4}, 3), random_tensor({6, 3, 4}, 4), {w, b}, o, 1e-5,
               "rnn " + policy_name(o));
}

}  // namespace
