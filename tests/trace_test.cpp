// Lazy recording and sync(): nothing runs until asked, sync computes every live pending
// tensor in one graph, dead tensors are not computed, and data never enters the hash.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace {

using lt::Tensor;

int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

TEST(Trace, RecordingThousandOpsExecutesNothing) {
  lt::metrics::reset();
  auto x = lt::tensor({1.0f, 2.0f});
  lt::Tensor y = x;
  for (int i = 0; i < 1000; ++i) y = y * 1.001f + 0.5f;
  EXPECT_EQ(counter("ExecuteCount"), 0);
  EXPECT_EQ(counter("CompileCount"), 0);
  EXPECT_GE(counter("TraceCount"), 2000);
  EXPECT_TRUE(y.is_pending());
  lt::sync();
  EXPECT_EQ(counter("ExecuteCount"), 1);
  EXPECT_FALSE(y.is_pending());
  double ref = 1.0;
  for (int i = 0; i < 1000; ++i) ref = static_cast<float>(static_cast<float>(ref * 1.001f) + 0.5f);
  EXPECT_NEAR(y.to_vector<float>()[0], ref, 1e-3 * ref);
}

TEST(Trace, SyncComputesEveryLivePendingTensorInOneGraph) {
  auto x = lt::tensor({1.0f, 2.0f, 3.0f});
  auto a = x * 2.0f;
  auto b = lt::exp(x);
  auto c = lt::sum(a);
  lt::metrics::reset();
  lt::sync();
  EXPECT_EQ(counter("ExecuteCount"), 1);
  EXPECT_FALSE(a.is_pending());
  EXPECT_FALSE(b.is_pending());
  EXPECT_FALSE(c.is_pending());
  EXPECT_EQ(c.item<float>(), 12.0f);
  EXPECT_EQ(counter("ExecuteCount"), 1);  // reading a materialized tensor runs nothing
}

TEST(Trace, DeadTensorsAreNotComputed) {
  auto x = lt::tensor({1.0f, 2.0f, 3.0f});
  {
    auto a = x * 3.0f;
    lt::sync();  // compiles the graph of `a` alone
  }
  lt::metrics::reset();
  auto a = x * 4.0f;
  {
    auto dead = lt::exp(x) + lt::sin(x);  // dropped before sync
  }
  lt::sync();
  // the same structure as the first graph: a cache hit, so `dead` was not part of it
  EXPECT_EQ(counter("CacheHit"), 1);
  EXPECT_EQ(counter("CompileCount"), 0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{4, 8, 12}));
}

TEST(Trace, SyncOfSomeTensorsLeavesTheOthersPending) {
  auto x = lt::tensor({1.0f, 2.0f});
  auto a = x + 1.0f;
  auto b = a * 2.0f;
  lt::sync({a});
  EXPECT_FALSE(a.is_pending());
  EXPECT_TRUE(b.is_pending());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{4, 6}));
}

TEST(Trace, SyncCutsThePendingGraphAtWhatItComputed) {
  auto x = lt::tensor({1.0f, 2.0f});
  auto a = lt::exp(x) + 1.0f;
  auto b = a * 2.0f;
  auto c = lt::clone(a);  // shares a's recorded op
  lt::sync({a});
  std::string text = lt::debug::to_text({b});
  EXPECT_EQ(text.find("exp"), std::string::npos) << text;  // b reads a's buffer
  EXPECT_FALSE(c.is_pending());                            // the shared op was computed
  EXPECT_EQ(c.to_vector<float>(), a.to_vector<float>());
  EXPECT_NEAR(b.to_vector<float>()[1], 2 * (std::exp(2.0f) + 1), 1e-4);
}

// A partial sync keeps what it computes that is held elsewhere, as MLX's eval does: a
// training loop that reads only its loss (the updated weights and AdamW's moments are
// computed on the way to the next step's loss) runs one cached graph per step, the same
// size each step, and trains as the loop that syncs everything does. Before, each step's
// graph held every earlier step's updates again (a step cost grew with its number).
TEST(Trace, ALoopThatReadsOnlyItsLossComputesEachStepOnce) {
  auto train = [](bool sync_all) {
    lt::manual_seed(3);
    Tensor w1 = (lt::randn({8, 16}) * 0.3f).requires_grad_();
    Tensor w2 = (lt::randn({16, 1}) * 0.3f).requires_grad_();
    const Tensor x = lt::randn({32, 8});
    const Tensor y = lt::sum(x, {1}, true);
    lt::sync();
    lt::optim::AdamW opt({w1, w2}, {.lr = 0.01, .fused = false});
    std::vector<float> losses;
    std::vector<int64_t> misses, executes;
    for (int step = 0; step < 8; ++step) {
      lt::metrics::reset();
      const Tensor err = lt::matmul(lt::relu(lt::matmul(x, w1)), w2) - y;
      Tensor loss = lt::mean(err * err);
      loss.backward();
      opt.step();
      opt.zero_grad();
      if (sync_all) lt::sync();
      losses.push_back(loss.item<float>());
      misses.push_back(counter("CacheMiss"));
      executes.push_back(counter("ExecuteCount"));
    }
    return std::tuple{losses, misses, executes};
  };
  const auto [all, misses_all, executes_all] = train(true);
  const auto [loss_only, misses, executes] = train(false);
  for (int step = 0; step < 8; ++step) {
    EXPECT_NEAR(loss_only[step], all[step], 1e-6f * (1 + std::abs(all[step]))) << step;
    EXPECT_EQ(executes[step], 1) << step;  // one graph a step, nothing recomputed later
    if (step >= 2) {
      EXPECT_EQ(misses[step], 0) << step;  // the same graph each step
    }
  }
  EXPECT_LT(all[7], all[0]);
}

TEST(Trace, DataNeverEntersTheGraphHash) {
  auto step = [](const lt::Tensor& x) { return lt::tanh(x) * 3.0f; };
  auto r0 = step(lt::tensor({1.0f, 2.0f}));
  lt::sync();
  lt::metrics::reset();
  auto r1 = step(lt::tensor({-5.0f, 7.0f}));
  lt::sync();
  EXPECT_EQ(counter("CompileCount"), 0);
  EXPECT_EQ(counter("CacheHit"), 1);
  EXPECT_NEAR(r1.to_vector<float>()[0], 3 * std::tanh(-5.0f), 1e-6);
}

TEST(Trace, ScalarsOtherThanZeroAndOneAreParameters) {
  auto x = lt::tensor({1.0f, 2.0f});
  (void)(x * 0.25f).to_vector<float>();
  lt::metrics::reset();
  for (int i = 0; i < 5; ++i) {
    auto y = x * (0.5f + static_cast<float>(i));
    EXPECT_EQ(y.to_vector<float>()[1], 2.0f * (0.5f + static_cast<float>(i)));
  }
  EXPECT_EQ(counter("CompileCount"), 0);
  // 1 is part of the graph: x * 1 is a different (simplified) program
  auto y1 = x * 1.0f;
  EXPECT_EQ(y1.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(counter("CompileCount"), 1);
}

TEST(Trace, SameValueDifferentBuffersIsADifferentGraphFromOneBufferTwice) {
  auto a = lt::tensor({1.0f, 2.0f});
  auto b = lt::tensor({3.0f, 4.0f});
  auto s1 = a + a;
  auto s2 = a + b;
  lt::sync({s1});
  lt::sync({s2});
  EXPECT_EQ(s1.to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(s2.to_vector<float>(), (std::vector<float>{4, 6}));
}

TEST(Trace, CopyIntoATensorIsSeenByEveryHolder) {
  auto w = lt::zeros({3});
  lt::Tensor alias = w;  // the same tensor
  w.copy_(lt::tensor({1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  w.copy_(w * 2.0f);
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  auto c = lt::clone(w);
  w.copy_(lt::scalar(7.0f));  // broadcast
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{7, 7, 7}));
  auto i = lt::zeros({2}, lt::int32);
  i.copy_(lt::tensor({1.7f, -2.2f}));  // cast to the destination dtype
  EXPECT_EQ(i.dtype(), lt::int32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -2}));
}

TEST(Trace, ReadingConvertsToTheRequestedType) {
  auto t = lt::tensor(std::vector<int64_t>{1, -2, 3}, {3});
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(lt::sum(t).item<int64_t>(), 2);
  EXPECT_EQ((t > 0).to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST(Trace, RandomNumbersAreReproducibleAndNewSeedsDoNotRecompile) {
  lt::manual_seed(123);
  auto a = lt::randn({1000}).to_vector<float>();
  lt::manual_seed(123);
  auto b = lt::randn({1000}).to_vector<float>();
  EXPECT_EQ(a, b);
  lt::metrics::reset();
  lt::manual_seed(7);
  auto c = lt::randn({1000}).to_vector<float>();
  EXPECT_NE(a, c);
  auto d = lt::randn({1000}).to_vector<float>();  // the next draw differs too
  EXPECT_NE(c, d);
  EXPECT_EQ(counter("CompileCount"), 0);
}

// ---- donation: an output written into an input's buffer that no one can read any more

std::vector<float> iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 7.0f;
  return v;
}

TEST(Donation, AnInputNoOneElseHoldsTakesTheOutput) {
  const std::vector<float> v = iota(1000);
  lt::Tensor x = lt::tensor(v, {1000});
  lt::sync({x});
  lt::metrics::reset();
  x = x * 2.0f + 1.0f;  // the old x has no other holder: its buffer takes the result
  lt::sync({x});
  EXPECT_EQ(counter("DonatedBuffers"), 1);
  const std::vector<float> got = x.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], v[i] * 2.0f + 1.0f) << i;
}

// Constants made inside a traced body are leaves the cached body keeps, not nodes of the
// synced graph: they are parameters too, and are never given.
TEST(Donation, NeverGivesATracedBodysOwnConstants) {
  const std::vector<float> v = iota(1000);
  auto body = [](const lt::Tensor& c, const lt::Tensor& x) {
    lt::Tensor next = c + x + lt::tensor(std::vector<float>(1000, 0.5f), {1000});
    return std::pair{next, lt::Tree()};
  };
  for (int call = 0; call < 3; ++call) {
    lt::Tensor xs = lt::reshape(lt::tensor(v, {1000}), {1, 1000}), init = lt::zeros({1000});
    lt::sync({xs, init});
    auto [c, ys] = lt::scan(body, init, xs, {.is_fn_pure = true});
    lt::sync({c});
    const std::vector<float> got = c.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], v[i] + 0.5f) << call << " " << i;
  }
  // the same in a function traced once: its body is inlined, so the constant is read by a
  // fused step that could write into it (x, the other candidate, is kept by its handle)
  auto add_constant = lt::assume_pure(
      [](const lt::Tensor& x) { return x + lt::tensor(std::vector<float>(1000, 0.5f), {1000}); });
  lt::Tensor x = lt::tensor(v, {1000});
  lt::sync({x});
  for (int call = 0; call < 3; ++call) {
    lt::Tensor y = add_constant(x);
    lt::sync({y});
    const std::vector<float> got = y.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], v[i] + 0.5f) << call << " " << i;
  }
}

TEST(Donation, NeverGivesABufferThatCanStillBeRead) {
  const std::vector<float> v = iota(1000);
  auto expect_values = [&](const lt::Tensor& t, float scale, float shift, const char* what) {
    const std::vector<float> got = t.to_vector<float>();
    ASSERT_EQ(got.size(), v.size()) << what;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], v[i] * scale + shift) << what << i;
  };
  {  // another handle to the old value
    lt::Tensor x = lt::tensor(v, {1000});
    lt::sync({x});
    lt::Tensor keep = x;
    lt::metrics::reset();
    x = x * 2.0f + 1.0f;
    lt::sync({x});
    EXPECT_EQ(counter("DonatedBuffers"), 0);
    expect_values(keep, 1, 0, "another handle ");
    expect_values(x, 2, 1, "the update ");
  }
  {  // a pending op outside the sync reads the old value, and is computed later
    lt::Tensor x = lt::tensor(v, {1000});
    lt::sync({x});
    lt::Tensor later = x * 3.0f;
    lt::metrics::reset();
    x = x * 2.0f + 1.0f;
    lt::sync({x});
    EXPECT_EQ(counter("DonatedBuffers"), 0);
    expect_values(later, 3, 0, "a pending reader ");
  }
  {  // a view of the input shares its buffer (and may come back as a result): kept
    lt::Tensor x = lt::tensor(v, {1000});
    lt::sync({x});
    lt::Tensor view = lt::reshape(x, {10, 100}), twice = x * 2.0f;
    x = lt::Tensor();  // only the two pending ops hold the old value now
    lt::metrics::reset();
    lt::sync({view, twice});
    EXPECT_EQ(counter("DonatedBuffers"), 0);
    expect_values(view, 1, 0, "the view ");
    expect_values(twice, 2, 0, "the product ");
  }
  {  // one result of a multi-result op synced: the others held are kept, so the op never
     // runs again and the inputs no one else holds are given to it
    lt::Tensor p = lt::tensor(v, {1000}), g = lt::full({1000}, 0.5f), m = lt::zeros({1000}),
               sq = lt::zeros({1000}), one = lt::full({}, 1.0f);
    lt::sync({p, g, m, sq, one});
    lt::AdamWState s = lt::adamw_update(p, g, m, sq, one, one, one, 0.9, 0.99, 1e-8);
    p = lt::Tensor();
    m = lt::Tensor();
    sq = lt::Tensor();
    lt::metrics::reset();
    lt::sync({s.param});
    EXPECT_EQ(counter("DonatedBuffers"), 3);
    EXPECT_FALSE(s.exp_avg.is_pending());
    EXPECT_FALSE(s.exp_avg_sq.is_pending());
    const std::vector<float> got = s.exp_avg.to_vector<float>();
    for (float e : got) ASSERT_FLOAT_EQ(e, 0.05f);
    for (float e : s.exp_avg_sq.to_vector<float>()) ASSERT_NEAR(e, 0.01f * 0.25f, 1e-9f);
    EXPECT_EQ(counter("ExecuteCount"), 1);
  }
}

}  // namespace
