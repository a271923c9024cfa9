// scan: the spec's examples, every case against an unrolled loop of the same function
// (values and gradients, both remat policies, reverse), traced and compiled once, errors.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"
#include "passes_off.h"

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
  for (const Tensor& t : floating_leaves(leaves))
    s = s + lt::astype(lt::sum(t), lt::DType::float32);
  return s;
}

// Runs fn as a plain C++ loop over the slices of xs; returns (carry, stacked ys) leaves.
template <typename F, typename C, typename X>
std::pair<std::vector<Tensor>, std::vector<Tensor>> unrolled(const F& fn, const C& init,
                                                             const X& xs, bool reverse) {
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
  for (size_t i = 0; i < sc.size(); ++i)
    expect_close(sc[i], rc[i], tol, what + ": carry " + std::to_string(i));
  if (!ry.empty()) {
    ASSERT_EQ(sy.size(), ry.size()) << what;
    for (size_t i = 0; i < sy.size(); ++i)
      expect_close(sy[i], ry[i], tol, what + ": ys " + std::to_string(i));
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

// A weight's gradient reads the activation transposed (h^T dy): the forward loop saves h as
// computed and the backward reads it through a view, instead of saving a transposed copy.
TEST(Scan, ActivationReadTransposedIsSavedAsComputed) {
  Tensor w1 = random_tensor({8, 16}, 21), w2 = random_tensor({16, 6}, 22);
  auto fn = [&](const Tensor& c, const Tensor& x) {
    Tensor h = lt::tanh(lt::matmul(x, w1));  // [4, 16]
    Tensor nc = c + lt::matmul(h, w2);
    return std::pair{nc, lt::sum(nc, {1})};
  };
  check_scan(fn, random_tensor({4, 6}, 23), random_tensor({5, 4, 8}, 24), {w1, w2}, kPolicies[0],
             1e-5, "mlp");
  w1.requires_grad_();
  w2.requires_grad_();
  auto [carry, ys] = lt::scan(fn, random_tensor({4, 6}, 23), random_tensor({5, 4, 8}, 24));
  std::vector<Tensor> grads = lt::autograd::grad({lt::sum(carry) + lt::sum(ys)}, {w1, w2});
  const std::string plan = lt::debug::to_program(grads);
  // the saved h stack [5, 4, 16] as computed: strides {64,16,1}; transposed it was {64,4,1}
  EXPECT_NE(plan.find("{64,16,1}"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("{64,4,1}"), std::string::npos) << plan;
}

// Stacked weights read as x Wᵀ over few rows: each weight's gradient, xᵀ dy per
// iteration, leaves the backward loop as its two thin factors and is multiplied after the
// loop for every iteration at once. The gradients match an unrolled loop, in both remat
// policies and reversed; a weight read some other way keeps its stacked gradient.
TEST(Scan, LowRankWeightGradientsLeaveTheLoopAsFactors) {
  const int64_t steps = 5;
  for (const auto& o : kPolicies) {
    Tensor u = random_tensor({steps, 24, 16}, 31).requires_grad_();  // [layers, out, in]
    Tensor v = random_tensor({steps, 16, 24}, 32).requires_grad_();
    Tensor s = random_tensor({steps, 16}, 33).requires_grad_();  // a scale: not a product
    Tensor h0 = random_tensor({4, 16}, 34).requires_grad_();
    auto layer = [](const Tensor& h, const Tensor& ui, const Tensor& vi, const Tensor& si) {
      Tensor a = lt::tanh(lt::matmul(h, lt::transpose(ui)));  // [4, 24]
      return lt::matmul(a, lt::transpose(vi)) * si + h;       // [4, 16]
    };
    lt::metrics::reset();
    auto [hn, ys] = lt::scan(
        [&](const Tensor& h, const std::vector<Tensor>& w) {
          Tensor nh = layer(h, w[0], w[1], w[2]);
          return std::pair{nh, lt::sum(nh * nh)};
        },
        h0, std::vector<Tensor>{u, v, s}, o);
    std::vector<Tensor> got = lt::autograd::grad({lt::sum(hn) + lt::sum(ys)}, {u, v, s, h0});
    EXPECT_EQ(counter("LoopGradFactored"), 2) << policy_name(o);  // u and v, not s
    // unrolled
    Tensor h = h0, total = lt::zeros({});
    const int64_t first = o.reverse ? steps - 1 : 0, step = o.reverse ? -1 : 1;
    for (int64_t k = 0, i = first; k < steps; ++k, i += step) {
      h = layer(h, lt::select(u, 0, i), lt::select(v, 0, i), lt::select(s, 0, i));
      total = total + lt::sum(h * h);
    }
    std::vector<Tensor> want = lt::autograd::grad({lt::sum(h) + total}, {u, v, s, h0});
    const char* names[] = {"du", "dv", "ds", "dh0"};
    for (int k = 0; k < 4; ++k)
      expect_close(got[k], want[k], 1e-4, policy_name(o) + " " + names[k]);
  }
}

// AdamW on stacked weights whose gradients leave the backward loop as factors runs beside
// that loop (LoopStep::updates): batch i of each update once iteration i is done, on the
// threads the loop leaves idle, in place while the loop still reads the other slices of the
// same weights. Three training steps match the same updates made after the loop (the
// gradients synced first) and the update op by op, in both remat policies and reversed.
// With slices of 256 KB and more the loop's thread reads the next ones ahead, and evicts
// those the updates write where the threads share no cache (LAZYTRACE_SHARED_CACHE=0).
TEST(Scan, AdamWUpdatesRunBesideTheBackwardLoop) {
  const int64_t steps = 6;
  // The three runs' products differ in shape (factors, whole gradients), and the kernel
  // choice may give each shape another library, and other rounding: AdamW turns a rounding
  // difference in a near-zero gradient into one of up to lr. The runs must multiply alike.
  const std::vector<std::string> passes_before = lt::debug::set_disabled_passes({"gemm_choice"});
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{70, 37}, {300, 256}})
    for (const auto& o : kPolicies) {
      std::vector<std::vector<float>> result;
      for (int run = 0; run < 3; ++run) {  // beside the loop; gradients first; op by op
        Tensor u = random_tensor({steps, out, in}, 41).requires_grad_();  // [layers, out, in]
        Tensor v = random_tensor({steps, in, out}, 42).requires_grad_();
        const Tensor h0 = random_tensor({3, in}, 43);
        lt::optim::AdamW opt({u, v}, {.lr = 0.01, .weight_decay = 0.1, .fused = run < 2});
        lt::metrics::reset();
        for (int it = 0; it < 3; ++it) {
          auto [hn, ys] = lt::scan(
              [](const Tensor& h, const std::vector<Tensor>& w) {
                Tensor a = lt::tanh(lt::matmul(h, lt::transpose(w[0])));  // [3, out]
                Tensor nh = lt::matmul(a, lt::transpose(w[1])) + h;       // [3, in]
                return std::pair{nh, lt::sum(nh * nh)};
              },
              h0, std::vector<Tensor>{u, v}, o);
          (lt::sum(hn) + lt::sum(ys) * 0.01).backward();
          if (run == 1) lt::sync({u.grad(), v.grad()});
          opt.step();
          opt.zero_grad();
          const std::string plan = lt::debug::to_program({u, v});
          EXPECT_EQ(plan.find("beside it") != std::string::npos, run == 0)
              << policy_name(o) << " run " << run << "\n"
              << plan;
          lt::sync();
        }
        EXPECT_EQ(counter("UpdatesBesideLoops") > 0, run == 0) << policy_name(o) << " run " << run;
        const char* shared = std::getenv("LAZYTRACE_SHARED_CACHE");
        if (shared != nullptr && out == 300 && run == 0) {
          EXPECT_EQ(counter("LoopSlicesEvicted") > 0, shared[0] == '0') << policy_name(o);
        }
        std::vector<float> w = u.to_vector<float>(), wv = v.to_vector<float>();
        w.insert(w.end(), wv.begin(), wv.end());
        result.push_back(std::move(w));
      }
      for (int run = 1; run < 3; ++run)
        for (size_t i = 0; i < result[0].size(); ++i)
          ASSERT_NEAR(result[0][i], result[run][i], 1e-5)
              << policy_name(o) << " run " << run << " element " << i;
      const std::vector<float> init = random_tensor({steps, out, in}, 41).to_vector<float>();
      EXPECT_NE(std::vector<float>(result[0].begin(), result[0].begin() + init.size()), init);
    }
  lt::debug::set_disabled_passes(passes_before);
}

TEST(Scan, TupleCarryWithIntegerCounterAndVectorXs) {
  Tensor w = random_tensor({3}, 5);
  using Carry = std::tuple<Tensor, Tensor>;
  auto fn = [&](const Carry& c, const std::vector<Tensor>& x) {
    const auto& [h, i] = c;
    Tensor step = lt::astype(i, lt::DType::float32);
    Tensor nh = h * lt::sigmoid(x[0]) + x[1] * w * step;
    return std::pair{Carry{nh, i + 1}, std::pair{lt::sum(nh), i * 2}};
  };
  Carry init{random_tensor({2, 3}, 6), lt::tensor({0})};
  std::vector<Tensor> xs{random_tensor({5, 2, 3}, 7), random_tensor({5, 3}, 8)};
  for (const auto& o : kPolicies) check_scan(fn, init, xs, {w}, o, 1e-5, "tuple " + policy_name(o));
  auto [c, ys] = lt::scan(fn, init, xs);
  EXPECT_EQ(std::get<1>(c).to_vector<int64_t>(), std::vector<int64_t>({5}));
  EXPECT_EQ(ys.second.to_vector<int64_t>(), std::vector<int64_t>({0, 2, 4, 6, 8}));
}

TEST(Scan, MixedDtypesHalfCarryBfloat16AndFloat32Xs) {
  auto fn = [](const Tensor& c, const std::pair<Tensor, Tensor>& x) {
    Tensor f = lt::astype(c, lt::DType::float32) * 0.5 +
               lt::astype(x.first, lt::DType::float32) * x.second;
    return std::pair{lt::astype(f, lt::DType::float16), lt::astype(f, lt::DType::bfloat16)};
  };
  Tensor init = random_tensor({4}, 9, lt::DType::float16);
  std::pair<Tensor, Tensor> xs{random_tensor({3, 4}, 10, lt::DType::bfloat16),
                               random_tensor({3, 4}, 11)};
  for (const auto& o : kPolicies) check_scan(fn, init, xs, {}, o, 2e-2, "mixed " + policy_name(o));
}

TEST(Scan, ConstantsMadeInsideTheBodyAndBoolCarry) {
  auto fn = [](const std::pair<Tensor, Tensor>& c, const Tensor& x) {
    Tensor k = lt::tensor({1.5f, -2.0f, 3.0f});  // a constant made inside
    Tensor h = c.first * k + x;
    Tensor seen = lt::astype(lt::astype(c.second, lt::DType::float32) +
                                 lt::astype(x > 1.0, lt::DType::float32),
                             lt::DType::float32) > 0.5;
    return std::pair{std::pair{h, seen}, lt::where(seen, h, -h)};
  };
  std::pair<Tensor, Tensor> init{random_tensor({3}, 12), lt::tensor({false, false, false})};
  Tensor xs = random_tensor({4, 3}, 13);
  for (const auto& o : kPolicies)
    check_scan(fn, init, xs, {}, o, 1e-5, "constants " + policy_name(o));
}

// A table made from arange alone (as a layer's rotary tables are) reads none of the body's
// inputs: its steps run once per loop, before the first iteration, and its storage stays
// live while the body's later steps reuse the arena (wrongly reused, the next iteration
// would read another step's values). The backward computes the table again instead of
// saving it per iteration, and runs it once too. Values and gradients match the unrolled
// loop.
TEST(Scan, LoopInvariantStepsRunOnceAndTheBackwardRemakesThem) {
  auto fn = [](const Tensor& c, const Tensor& x) {
    Tensor table = lt::cos(lt::arange(0, 16, 1, lt::DType::float32) * 0.25);    // [16]
    Tensor wide = lt::tanh(lt::unsqueeze(c, 1) * table + lt::unsqueeze(x, 1));  // [8, 16]
    Tensor mixed = lt::matmul(wide, lt::transpose(wide)) * 0.01;                // [8, 8]
    Tensor nc = lt::sum(wide, {1}) * 0.1 + lt::sum(mixed, {1}) + c * 0.5;
    return std::pair{nc, wide};
  };
  const Tensor init = random_tensor({8}, 61), xs = random_tensor({5, 8}, 62);
  for (const auto& o : kPolicies)
    check_scan(fn, init, xs, {}, o, 1e-5, "invariant table " + policy_name(o));
  Tensor c0 = random_tensor({8}, 61).requires_grad_(),
         x0 = random_tensor({5, 8}, 62).requires_grad_();
  auto [c, ys] = lt::scan(fn, c0, x0);
  const std::vector<Tensor> grads = lt::autograd::grad({lt::sum(c) + lt::sum(ys)}, {c0, x0});
  const std::string plan = lt::debug::to_program(grads);
  size_t loops = 0;
  for (size_t at = plan.find("run once"); at != std::string::npos;
       at = plan.find("run once", at + 1))
    ++loops;
  EXPECT_EQ(loops, 2u) << "the forward loop and the backward loop: " << plan;
}

TEST(Scan, RandomOpsDrawDifferentNumbersEachIteration) {
  auto fn = [](const Tensor& c, const Tensor& x) {
    Tensor r = lt::rand({8});
    return std::pair{c + lt::sum(r), r + x * 0.0};
  };
  auto [c1, ys1] = lt::scan(fn, lt::tensor({0.0f}), lt::zeros({3, 8}));
  std::vector<float> v = ys1.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j)
      EXPECT_NE(std::vector<float>(v.begin() + i * 8, v.begin() + i * 8 + 8),
                std::vector<float>(v.begin() + j * 8, v.begin() + j * 8 + 8));
  for (float f : v) EXPECT_TRUE(f >= 0 && f < 1);
  auto [c2, ys2] = lt::scan(fn, lt::tensor({0.0f}), lt::zeros({3, 8}));
  EXPECT_NE(ys2.to_vector<float>(), v) << "a second call draws new numbers";
}

TEST(Scan, DropoutGradientsAreTheSameWithBothPolicies) {
  // recompute draws the forward's numbers again: the same mask, the same gradients
  Tensor w = random_tensor({5, 5}, 14);
  auto fn = [&](const Tensor& h, const Tensor& x) {
    Tensor keep = lt::astype(lt::rand(h.shape()) > 0.3, lt::DType::float32);
    Tensor nh = lt::tanh(lt::matmul(h * keep, w) + x);
    return std::pair{nh, nh};
  };
  std::vector<std::vector<float>> grads;
  for (lt::Remat r : {lt::Remat::save, lt::Remat::recompute}) {
    lt::manual_seed(7);
    Tensor init = random_tensor({2, 5}, 15), xs = random_tensor({4, 2, 5}, 16);
    w.set_grad({});
    w.requires_grad_();
    auto [c, ys] = lt::scan(fn, init, xs, {.remat = r});
    total({c, ys}).backward();
    grads.push_back(w.grad().to_vector<float>());
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_NEAR(grads[0][i], grads[1][i], 1e-5);
}

TEST(Scan, ZeroLengthReturnsInitAndEmptyYs) {
  Tensor init = random_tensor({2, 3}, 17);
  init.requires_grad_();
  auto fn = [](const Tensor& c, const Tensor& x) { return std::pair{c * x, c + x}; };
  auto [c, ys] = lt::scan(fn, init, lt::zeros({0, 2, 3}));
  EXPECT_EQ(c.to_vector<float>(), init.to_vector<float>());
  EXPECT_EQ(ys.shape(), lt::Shape({0, 2, 3}));
  lt::sum(c).backward();
  EXPECT_EQ(init.grad().to_vector<float>(), std::vector<float>(6, 1.0f));
}

// Slices of 256 KB and more: while an iteration runs, the pool's threads read the next
// one's slices ahead (backends/cpu/loop.cpp). Against a plain loop, forward and reverse.
TEST(Scan, LargeSlicesReadAheadGiveThePlainLoopsResult) {
  const int64_t n = 5, rows = 64, cols = 1024;  // 256 KB of float32 per slice
  Tensor xs = random_tensor({n, rows, cols}, 41), ws = random_tensor({n, cols}, 42);
  Tensor init = random_tensor({rows, cols}, 43);
  const std::vector<float> x = xs.to_vector<float>(), w = ws.to_vector<float>(),
                           c0 = init.to_vector<float>();
  auto fn = [](const Tensor& c, const Tree& in) {
    Tensor next = c * 0.5 + in[0].tensor() * in[1].tensor();
    return std::pair{next, lt::sum(next, {1})};
  };
  for (bool reverse : {false, true}) {
    auto [c, ys] = lt::scan(fn, init, Tree::list({xs, ws}), {.reverse = reverse});
    std::vector<float> ref = c0, ref_ys(static_cast<size_t>(n * rows));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = reverse ? n - 1 - j : j;
      for (int64_t r = 0; r < rows; ++r) {
        double row = 0;
        for (int64_t k = 0; k < cols; ++k) {
          float& v = ref[static_cast<size_t>(r * cols + k)];
          v = v * 0.5f + x[static_cast<size_t>((i * rows + r) * cols + k)] *
                             w[static_cast<size_t>(i * cols + k)];
          row += v;
        }
        ref_ys[static_cast<size_t>(i * rows + r)] = static_cast<float>(row);
      }
    }
    const std::vector<float> got = c.to_vector<float>(), got_ys = ys.to_vector<float>();
    for (size_t e = 0; e < ref.size(); ++e)
      ASSERT_NEAR(got[e], ref[e], 1e-5 * (1 + std::fabs(ref[e])))
          << "reverse " << reverse << " " << e;
    for (size_t e = 0; e < ref_ys.size(); ++e)
      ASSERT_NEAR(got_ys[e], ref_ys[e], 1e-3 * (1 + std::fabs(ref_ys[e])))
          << "reverse " << reverse << " y " << e;
  }
}

// The loop reads the next iteration's slices ahead in the order its body first reads them
// (the compiler's LoopStep::x_order): here the second x, which the product reads, before
// the first, which only the sum after it does.
TEST(Scan, SlicesAreReadAheadInTheOrderTheBodyReadsThem) {
  const int64_t n = 3, d = 8;
  Tensor as = random_tensor({n, d, d}, 51), bs = random_tensor({n, d, d}, 52);
  Tensor init = random_tensor({d, d}, 53);
  auto fn = [](const Tensor& c, const Tree& in) {
    Tensor next = lt::matmul(c, in[1].tensor()) + in[0].tensor();
    return std::pair{next, lt::sum(next)};
  };
  auto [c, ys] = lt::scan(fn, init, Tree::list({as, bs}));
  const std::string plan = lt::debug::to_program({c, ys});
  EXPECT_NE(plan.find("xs in first-read order: 2 1"), std::string::npos) << plan;
  const std::vector<float> c0 = init.to_vector<float>();
  std::vector<double> ref(c0.begin(), c0.end());
  const std::vector<float> a = as.to_vector<float>(), b = bs.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> next(static_cast<size_t>(d * d));
    for (int64_t r = 0; r < d; ++r)
      for (int64_t k = 0; k < d; ++k) {
        double v = a[static_cast<size_t>((i * d + r) * d + k)];
        for (int64_t q = 0; q < d; ++q)
          v += ref[static_cast<size_t>(r * d + q)] * b[static_cast<size_t>((i * d + q) * d + k)];
        next[static_cast<size_t>(r * d + k)] = v;
      }
    ref = next;
  }
  const std::vector<float> got = c.to_vector<float>();
  for (size_t e = 0; e < ref.size(); ++e)
    ASSERT_NEAR(got[e], ref[e], 1e-4 * (1 + std::fabs(ref[e])));
}

TEST(Scan, BodyIsTracedOnceAndCompiledOnceWhateverTheLength) {
  auto fn = [](const Tensor& c, const Tensor& x) {
    Tensor n = c * 0.5 + lt::exp(x);
    return std::pair{n, n * 2};
  };
  const int64_t traces = counter("LoopTrace"), bodies = counter("BodyCompileCount");
  for (int64_t n : {10, 100, 1000}) {
    auto [c, ys] = lt::scan(fn, lt::tensor({0.0f, 1.0f}), lt::zeros({n, 2}));
    // c_{k+1} = c_k / 2 + 1 -> 2 - (2 - c_0) / 2^n
    std::vector<float> v = c.to_vector<float>();
    EXPECT_NEAR(v[0], 2 - 2 / std::pow(2.0, static_cast<double>(n)), 1e-6);
    EXPECT_EQ(ys.shape(), lt::Shape({n, 2}));
  }
  EXPECT_EQ(counter("LoopTrace") - traces, 3) << "traced once per scan call";
  EXPECT_EQ(counter("BodyCompileCount") - bodies, 1) << "one body program for every length";

  const int64_t hits = counter("LoopHit"), traced = counter("LoopTrace");
  for (int i = 0; i < 3; ++i) {
    auto [c, ys] = lt::scan(fn, lt::tensor({0.0f, 1.0f}), lt::zeros({7, 2}), {.is_fn_pure = true});
    lt::sync({c, ys});
  }
  EXPECT_EQ(counter("LoopTrace") - traced, 1) << "is_fn_pure: traced on the first call only";
  EXPECT_EQ(counter("LoopHit") - hits, 2);
}

TEST(Scan, IsFnPureReadsEachCallsXsAndGradients) {
  Tensor w = random_tensor({3}, 18);
  auto fn = [&](const Tensor& c, const Tensor& x) { return std::pair{c * w + x, c}; };
  lt::ScanOptions pure{.is_fn_pure = true};
  for (uint64_t seed : {19, 20}) {
    w.set_grad({});
    check_scan(fn, random_tensor({3}, seed), random_tensor({4, 3}, seed + 10), {w}, pure, 1e-5,
               "pure seed " + std::to_string(seed));
  }
}

// is_fn_pure keys on the function, captures included: the same lambda expression capturing
// another tensor or another number is another function (as another Python closure is), so
// each call computes with its own and its gradient reaches its own tensor. c_{k+1} = c_k + w
// (or + k) over 3 iterations from 0: c = 3w, dc/dw = 3.
TEST(Scan, IsFnPureTellsClosuresByWhatTheyCapture) {
  const int64_t traced = counter("LoopTrace");
  for (double v : {2.0, 5.0, 2.0}) {
    Tensor w = lt::tensor({v}).requires_grad_();
    auto [c, ys] = lt::scan(
        [w](const Tensor& c, const Tensor& x) {
          return std::pair{c + x * w, c};
        },
        lt::tensor({0.0}), lt::ones({3, 1}, lt::float64), {.is_fn_pure = true});
    EXPECT_DOUBLE_EQ(c.item<double>(), 3 * v);
    lt::sum(c).backward();
    EXPECT_DOUBLE_EQ(w.grad().item<double>(), 3.0) << "w = " << v;
  }
  EXPECT_EQ(counter("LoopTrace") - traced, 3) << "a trace per captured tensor";
  for (double k : {2.0, 5.0}) {
    auto [c, ys] = lt::scan(
        [k](const Tensor& c, const Tensor& x) {
          return std::pair{c + x * k, c};
        },
        lt::tensor({0.0}), lt::ones({3, 1}, lt::float64), {.is_fn_pure = true});
    EXPECT_DOUBLE_EQ(c.item<double>(), 3 * k);
  }
  // the same captures: the body is reused
  Tensor w = lt::tensor({1.5}).requires_grad_();
  auto fn = [w](const Tensor& c, const Tensor& x) { return std::pair{c + x * w, c}; };
  const int64_t before = counter("LoopTrace");
  for (int i = 0; i < 3; ++i) {
    auto [c, ys] =
        lt::scan(fn, lt::tensor({0.0}), lt::ones({3, 1}, lt::float64), {.is_fn_pure = true});
    EXPECT_DOUBLE_EQ(c.item<double>(), 4.5);
  }
  EXPECT_EQ(counter("LoopTrace") - before, 1);
}

// A closure that owns a copy of a container (its copy holds other memory, so a later
// closure's container could reuse the address) cannot be told from another by its bytes:
// traced at each call, never given a body traced with other values.
TEST(Scan, IsFnPureTracesClosuresOwningContainersAtEachCall) {
  const int64_t traced = counter("LoopTrace");
  const int64_t n = 1000;
  for (int k = 1; k <= 4; ++k) {
    std::vector<float> coef(n, static_cast<float>(k));
    std::string name = "a name long enough to live on the heap " + std::to_string(k);
    auto [c, ys] = lt::scan(
        [coef, name](const Tensor& c, const Tensor& x) {
          return std::pair{c + x * lt::tensor(coef, {n}), c};
        },
        lt::zeros({n}), lt::ones({3, n}), {.is_fn_pure = true});
    EXPECT_EQ(c.to_vector<float>()[n - 1], 3.0f * static_cast<float>(k)) << "k = " << k;
  }
  EXPECT_EQ(counter("LoopTrace") - traced, 4);
}

// A loop's backward reads a captured tensor as its forward did, as plain ops' backward
// does: c_{k+1} = c_k * w over 2 iterations from x: c = x w^2, dc/dx = w^2 = 4 with the
// forward's w = 2, whatever w holds by the time backward runs.
TEST(Scan, BackwardReadsCapturedTensorsAsTheForwardDid) {
  for (lt::Remat remat : {lt::Remat::save, lt::Remat::recompute}) {
    Tensor w = lt::tensor({2.0});
    Tensor x = lt::tensor({3.0}).requires_grad_();
    auto [c, ys] = lt::scan(
        [w](const Tensor& c, const Tensor&) {
          return std::pair{c * w, c};
        },
        x, lt::zeros({2, 1}, lt::float64), {.remat = remat});
    {
      lt::NoGradGuard g;
      w.copy_(lt::tensor({100.0}));
    }
    lt::sum(c).backward();
    EXPECT_DOUBLE_EQ(x.grad().item<double>(), 4.0);
  }
  Tensor w = lt::tensor({2.0});
  Tensor x = lt::tensor({3.0}).requires_grad_();
  Tensor c = lt::fori_loop(
      0, 2, [w](const Tensor&, const Tensor& c) { return c * w; }, x);
  {
    lt::NoGradGuard g;
    w.copy_(lt::tensor({100.0}));
  }
  lt::sum(c).backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 4.0);
}

TEST(Scan, NestedScanAndScanInsideCompileAndAssumePure) {
  Tensor w = random_tensor({3}, 21);
  // an inner scan over each row of x, inside an outer scan over rows
  auto inner = [&](const Tensor& c, const Tensor& x) { return std::pair{c * w + x, c}; };
  auto outer = [&](const Tensor& c, const Tensor& xrow) {
    auto [ci, ys] = lt::scan(inner, c, xrow);
    return std::pair{lt::tanh(ci), lt::sum(ys, {0})};
  };
  for (const auto& o : kPolicies)
    check_scan(outer, random_tensor({3}, 22), random_tensor({4, 2, 3}, 23), {w}, o, 1e-5,
               "nested " + policy_name(o));

  Tensor init = random_tensor({3}, 24), xs = random_tensor({5, 2, 3}, 25);
  auto [rc, ry] = unrolled(outer, init, xs, false);
  auto step = lt::compile([&](const Tensor& i, const Tensor& x) { return lt::scan(outer, i, x); });
  auto pure =
      lt::assume_pure([&](const Tensor& i, const Tensor& x) { return lt::scan(outer, i, x); });
  for (int k = 0; k < 2; ++k) {
    auto [c, ys] = step(init, xs);
    expect_close(c, rc[0], 1e-5, "compiled carry");
    expect_close(ys, ry[0], 1e-5, "compiled ys");
    auto [c2, ys2] = pure(init, xs);
    expect_close(c2, rc[0], 1e-5, "assume_pure carry");
    expect_close(ys2, ry[0], 1e-5, "assume_pure ys");
  }
}

// ---- errors

TEST(ScanErrors, XsWithDifferentLeadingSizes) {
  auto fn = [](const Tensor& c, const std::vector<Tensor>& x) {
    return std::pair{c + x[0] + x[1], Tree()};
  };
  expect_error(
      [&] {
        lt::scan(fn, lt::zeros({2}), std::vector<Tensor>{lt::zeros({3, 2}), lt::zeros({5, 2})});
      },
      {"[scan]", "different leading sizes", "[0] f32[3, 2] has 3", "[1] f32[5, 2] has 5",
       "first dim"});
}

TEST(ScanErrors, EmptyXs) {
  auto fn = [](const Tensor& c, const std::vector<Tensor>&) { return std::pair{c, Tree()}; };
  expect_error([&] { lt::scan(fn, lt::zeros({2}), std::vector<Tensor>{}); },
               {"[scan]", "xs is an empty pytree", "fori_loop"});
}

TEST(ScanErrors, ScalarXsLeaf) {
  auto fn = [](const Tensor& c, const Tensor& x) { return std::pair{c + x, Tree()}; };
  expect_error([&] { lt::scan(fn, lt::zeros({2}), lt::sum(lt::tensor({1.0f}))); },
               {"[scan]", "is a scalar (f32[])", "leading dim"});
}

TEST(ScanErrors, CarryChangesDtype) {
  auto fn = [](const std::pair<Tensor, Tensor>& c, const Tensor& x) {
    return std::pair{std::pair{c.first + x, lt::astype(c.second, lt::DType::float16)}, Tree()};
  };
  expect_error(
      [&] {
        lt::scan(fn, std::pair{lt::zeros({2}), lt::zeros({2})}, lt::zeros({3, 2}));
      },
      {"[scan]", "carry input and carry output must have equal types", "[1]: f32[2]",
       "became [1]: f16[2]", "astype(t, dtype)"});
}

TEST(ScanErrors, CarryChangesShape) {
  auto fn = [](const Tensor& c, const Tensor& x) {
    return std::pair{lt::concat({c, x}, 0), Tree()};
  };
  expect_error(
      [&] {
        lt::scan(fn, lt::zeros({2}), lt::zeros({3, 2}));
      },
      {"[scan]", "f32[2] became", "f32[4]", "reshape"});
}

TEST(ScanErrors, CarryChangesStructure) {
  auto fn = [](const Tree& c, const Tensor& x) {
    return std::pair{Tree::dict({{"a", c["a"].tensor() + x}, {"b", x}}), Tree()};
  };
  expect_error(
      [&] {
        lt::scan(fn, Tree::dict({{"a", lt::zeros({2})}}), lt::zeros({3, 2}));
      },
      {"[scan]", "carry input and carry output must have equal types", "tree {a: *}",
       "tree {a: *, b: *}"});
}

TEST(ScanErrors, HigherOrderGradients) {
  Tensor x = random_tensor({3}, 26);
  x.requires_grad_();
  auto fn = [](const Tensor& c, const Tensor& xi) { return std::pair{c * xi, Tree()}; };
  auto [c, ys] = lt::scan(fn, x, lt::ones({2, 3}));
  expect_error([&] { lt::autograd::grad({lt::sum(c)}, {x}, {}, {.create_graph = true}); },
               {"[scan]", "higher-order gradients (create_graph)", "unroll"});
}

TEST(ScanErrors, BodyOutputThatIsNotAPair) {
  auto fn = [](const Tree& c, const Tensor& x) { return Tree::list({c, Tree(x), Tree(x)}); };
  expect_error(
      [&] {
        lt::scan(fn, Tree(lt::zeros({2})), lt::zeros({3, 2}));
      },
      {"[scan]", "must return a pair (new_carry, y)", "[*, *, *]", "std::pair"});
}

// The body writes its carry in place (the spec's cumsum, acc += x) with gradients on: the
// update rebinds the body's own handle, and the gradient is still taken with respect to the
// carry it was given. Where the loop's inputs require grad, the body runs once per call.
TEST(Scan, InPlaceUpdateOfTheCarryIsDifferentiableAndTheBodyRunsOnce) {
  int runs = 0;
  auto cumsum = [&runs](const Tensor& acc, const Tensor& x) {
    ++runs;
    Tensor a = acc;
    a.copy_(a + x);
    return std::pair{a, a};
  };
  Tensor xs = lt::tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  lt::metrics::reset();
  auto [final_carry, ys] = lt::scan(cumsum, lt::tensor({0.0f}), xs);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(counter("LoopTrace"), 1);
  EXPECT_EQ(counter("LoopBackwardTrace"), 1);
  (lt::sum(final_carry) + lt::sum(ys)).backward();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(final_carry.to_vector<float>(), (std::vector<float>{6}));
  // d(final + the prefix sums)/d xs[i] = 1 + (3 - i)
  EXPECT_EQ(xs.grad().to_vector<float>(), (std::vector<float>{4, 3, 2}));
}

}  // namespace

namespace {

// A loop whose slices are large enough to read ahead runs its first runs both ways in turn
// (pass read_ahead_choice) and then keeps one: every run gives the same bits, and the choice
// is made once per loop. With the pass off nothing is timed.
TEST(Scan, ReadingAheadIsChosenPerLoopByTimingAndChangesNoValue) {
  lt::manual_seed(4);
  const lt::Tensor w = lt::randn({6, 256, 256}) * 0.05f;  // 256 KiB a slice
  const lt::Tensor h0 = lt::randn({8, 256});
  lt::sync({w, h0});
  auto run = [&] {
    auto body = [](const lt::Tensor& c, const lt::Tensor& wi) {
      return std::pair{lt::tanh(lt::matmul(c, wi)), lt::Tree()};
    };
    return lt::scan(body, h0, w).first.to_vector<float>();
  };
  for (const bool on : {true, false}) {
    lt_test::PassesOff off(on ? std::vector<std::string>{}
                              : std::vector<std::string>{"read_ahead_choice"});
    lt::clear_caches();
    const int64_t before = lt::metrics::counter("ReadAheadChoice[ahead]") +
                           lt::metrics::counter("ReadAheadChoice[not ahead]");
    const std::vector<float> first = run();
    for (int i = 0; i < 12; ++i) ASSERT_EQ(run(), first) << "run " << i;
    const int64_t chosen = lt::metrics::counter("ReadAheadChoice[ahead]") +
                           lt::metrics::counter("ReadAheadChoice[not ahead]") - before;
    EXPECT_EQ(chosen, on ? 1 : 0);
    // against a plain loop in float64
    const std::vector<float> hv = h0.to_vector<float>();
    std::vector<double> h(hv.begin(), hv.end());
    const std::vector<float> wv = w.to_vector<float>();
    for (int l = 0; l < 6; ++l) {
      std::vector<double> next(h.size(), 0.0);
      for (int r = 0; r < 8; ++r)
        for (int k = 0; k < 256; ++k)
          for (int c = 0; c < 256; ++c)
            next[r * 256 + c] += h[r * 256 + k] * wv[(l * 256 + k) * 256 + c];
      for (double& v : next) v = std::tanh(v);
      h = next;
    }
    for (size_t i = 0; i < h.size(); ++i) ASSERT_NEAR(first[i], h[i], 1e-4) << i;
  }
}

}  // namespace
