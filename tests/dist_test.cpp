// Collectives with threads as ranks (lt::dist::run_threads), against plain loops over what
// each rank holds; their gradients against the gradient of the sum of the ranks' losses,
// worked out by hand; the errors that replace hangs.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include <chrono>

#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "expect_error.h"
#include "runtime/communicator.h"

namespace {

// Rank r's value at i: distinct across ranks, with fractions that make float sums round.
float value(int r, int64_t i) {
  return static_cast<float>(0.1 * (r + 1) + 0.37 * static_cast<double>(i) - 1.3 * r * (i % 3));
}

std::vector<float> values(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
  return v;
}

// The reduction in rank order, in float, as the thread group computes it.
std::vector<float> reduced(int ranks, int64_t n, const char* op) {
  std::vector<float> acc = values(0, n);
  for (int r = 1; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i) {
      float& a = acc[static_cast<size_t>(i)];
      const float x = value(r, i);
      if (std::string(op) == "max")
        a = std::max(a, x);
      else if (std::string(op) == "min")
        a = std::min(a, x);
      else
        a += x;
    }
  return acc;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceMatchesALoopOverRanks) {
  const int n = GetParam();
  lt::dist::run_threads(n, [&](int r) {
    EXPECT_EQ(lt::dist::rank(), r);
    EXPECT_EQ(lt::dist::world_size(), n);
    lt::Tensor x = lt::tensor(values(r, 10), {2, 5});
    for (const char* op : {"sum", "max", "min"}) {
      EXPECT_EQ(lt::all_reduce(x, op).to_vector<float>(), reduced(n, 10, op)) << op;
    }
    std::vector<float> mean = reduced(n, 10, "sum");
    for (float& m : mean) m *= static_cast<float>(1.0 / n);
    EXPECT_EQ(lt::all_reduce(x, "mean").to_vector<float>(), mean);
    std::vector<float> scaled = reduced(n, 10, "sum");
    for (float& m : scaled) m *= 0.25f;
    EXPECT_EQ(lt::all_reduce(x, "sum", 0.25).to_vector<float>(), scaled);
    // integers, exactly
    lt::Tensor k = lt::tensor(std::vector<int64_t>{r, 10 * r + 1, -r}, {3});
    const int64_t s = n * (n - 1) / 2;
    EXPECT_EQ(lt::all_reduce(k).to_vector<int64_t>(), (std::vector<int64_t>{s, 10 * s + n, -s}));
    EXPECT_EQ(lt::all_reduce(k, "max").to_vector<int64_t>(),
              (std::vector<int64_t>{n - 1, 10 * (n - 1) + 1, 0}));
  });
}

TEST_P(Collectives, ReduceScatterAllGatherBroadcastMatchLoops) {
  const int n = GetParam();
  lt::dist::run_threads(n, [&](int r) {
    const int64_t block = 3, cols = 2;
    lt::Tensor x = lt::tensor(values(r, n * block * cols), {n * block, cols});
    const std::vector<float> all = reduced(n, n * block * cols, "sum");
    const std::vector<float> mine(all.begin() + r * block * cols,
                                  all.begin() + (r + 1) * block * cols);
    lt::Tensor rs = lt::reduce_scatter(x);
    EXPECT_EQ(rs.shape(), (lt::Shape{block, cols}));
    EXPECT_EQ(rs.to_vector<float>(), mine);

    lt::Tensor y = lt::tensor(values(r, 4), {2, 2});
    lt::Tensor g = lt::all_gather(y);
    EXPECT_EQ(g.shape(), (lt::Shape{2 * n, 2}));
    std::vector<float> want;
    for (int q = 0; q < n; ++q) {
      const std::vector<float> v = values(q, 4);
      want.insert(want.end(), v.begin(), v.end());
    }
    EXPECT_EQ(g.to_vector<float>(), want);

    const int root = n - 1;
    lt::Tensor d = lt::tensor(std::vector<double>{1.5 * r, -2.0 * r}, {2});
    EXPECT_EQ(lt::broadcast(d, root).to_vector<double>(),
              (std::vector<double>{1.5 * root, -2.0 * root}));
    lt::dist::barrier();
  });
}

// Gradients of L = sum over ranks q of sum(w_q * op(x_q)), where w_q differs per rank.
TEST_P(Collectives, GradientsAreThoseOfTheSumOfTheRanksLosses) {
  const int n = GetParam();
  lt::dist::run_threads(n, [&](int r) {
    const int64_t len = 2 * n;
    auto w_of = [&](int q, int64_t m) {
      std::vector<float> w(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) w[static_cast<size_t>(i)] = float(q + 1) + 0.5f * float(i);
      return w;
    };
    // all_reduce(sum, scale 0.5): dL/dx_r = 0.5 * sum_q w_q
    lt::Tensor x = lt::tensor(values(r, len), {len}).requires_grad_();
    lt::sum(lt::tensor(w_of(r, len), {len}) * lt::all_reduce(x, "sum", 0.5)).backward();
    std::vector<float> want(static_cast<size_t>(len), 0.f);
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < len; ++i) want[static_cast<size_t>(i)] += w_of(q, len)[size_t(i)];
    for (float& v : want) v *= 0.5f;
    EXPECT_EQ(x.grad().to_vector<float>(), want);

    // all_gather: dL/dx_r = sum_q (block r of w_q), w_q of the gathered length
    lt::Tensor a = lt::tensor(values(r, 2), {2}).requires_grad_();
    lt::sum(lt::tensor(w_of(r, 2 * n), {2 * n}) * lt::all_gather(a)).backward();
    std::vector<float> ga(2, 0.f);
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 2; ++i) ga[size_t(i)] += w_of(q, 2 * n)[size_t(2 * r + i)];
    EXPECT_EQ(a.grad().to_vector<float>(), ga);

    // reduce_scatter(mean): dL/dx_r, block q = w_q / n
    lt::Tensor b = lt::tensor(values(r, len), {len}).requires_grad_();
    lt::sum(lt::tensor(w_of(r, 2), {2}) * lt::reduce_scatter(b, "mean")).backward();
    std::vector<float> gb;
    for (int q = 0; q < n; ++q)
      for (float w : w_of(q, 2)) gb.push_back(w * static_cast<float>(1.0 / n));
    EXPECT_EQ(b.grad().to_vector<float>(), gb);

    // all_reduce(max): the gradient goes to the ranks holding the maximum, split among ties
    std::vector<float> cv = {float(r), 7.f};  // element 0: rank n-1 alone; element 1: all tie
    lt::Tensor c = lt::tensor(cv, {2}).requires_grad_();
    lt::sum(lt::tensor(w_of(r, 2), {2}) * lt::all_reduce(c, "max")).backward();
    float wsum0 = 0, wsum1 = 0;
    for (int q = 0; q < n; ++q) {
      wsum0 += w_of(q, 2)[0];
      wsum1 += w_of(q, 2)[1];
    }
    const std::vector<float> gc = c.grad().to_vector<float>();
    EXPECT_EQ(gc[0], r == n - 1 ? wsum0 : 0.f);
    EXPECT_FLOAT_EQ(gc[1], wsum1 / static_cast<float>(n));

    // all_reduce(min, scale 0.3): rank 0 alone holds the minimum of element 0
    lt::Tensor m = lt::tensor(cv, {2}).requires_grad_();
    lt::sum(lt::tensor(w_of(r, 2), {2}) * lt::all_reduce(m, "min", 0.3)).backward();
    const std::vector<float> gm = m.grad().to_vector<float>();
    EXPECT_FLOAT_EQ(gm[0], r == 0 ? 0.3f * wsum0 : 0.f);
    EXPECT_FLOAT_EQ(gm[1], 0.3f * wsum1 / static_cast<float>(n));
  });
}

// A compiled step and a scan with collectives inside: one graph per rank, the right values.
TEST_P(Collectives, RunInsideCompileAndScan) {
  const int n = GetParam();
  const std::string name = "collective_step" + std::to_string(n);
  lt::dist::run_threads(n, [&](int r) {
    auto step = lt::compile([](const lt::Tensor& x) { return lt::all_reduce(x * 2.f, "mean"); },
                            {.name = name});
    for (int it = 0; it < 3; ++it) {
      lt::Tensor x = lt::full({4}, static_cast<float>(r + it));
      // mean over ranks of 2 (r + it) = 2 it + (n - 1)
      const float want = 2.f * static_cast<float>(it) + static_cast<float>(n - 1);
      for (float v : step(x).to_vector<float>()) EXPECT_FLOAT_EQ(v, want);
    }
    // scan: carry += all_reduce(x_i) per iteration
    lt::Tensor xs = lt::tensor(values(r, 6), {3, 2});
    auto [final, ys] = lt::scan(
        [](const lt::Tensor& c, const lt::Tensor& x) {
          lt::Tensor s = c + lt::all_reduce(x);
          return std::pair{s, s};
        },
        lt::zeros({2}), xs);
    const std::vector<float> all = reduced(n, 6, "sum");
    std::vector<float> want = {0.f, 0.f};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) want[size_t(j)] += all[size_t(2 * i + j)];
    const std::vector<float> got = final.to_vector<float>();
    for (int j = 0; j < 2; ++j) EXPECT_FLOAT_EQ(got[size_t(j)], want[size_t(j)]);
    EXPECT_EQ(ys.shape(), (lt::Shape{3, 2}));
  });
  // each rank compiled the step once (its own executable), and reused it
  EXPECT_EQ(lt::metrics::counter("CompileCount[" + name + "]"), n);
  EXPECT_EQ(lt::metrics::counter("ExecuteCount[" + name + "]"), 3 * n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(1, 2, 3, 4));

TEST(Dist, SingleProcessCollectivesAreIdentities) {
  EXPECT_EQ(lt::dist::world_size(), 1);
  EXPECT_EQ(lt::dist::rank(), 0);
  lt::Tensor x = lt::tensor(values(0, 6), {3, 2});
  EXPECT_EQ(lt::all_reduce(x).to_vector<float>(), values(0, 6));
  EXPECT_EQ(lt::all_gather(x).to_vector<float>(), values(0, 6));
  EXPECT_EQ(lt::reduce_scatter(x).to_vector<float>(), values(0, 6));
  EXPECT_EQ(lt::broadcast(x).to_vector<float>(), values(0, 6));
  // (a scale still applies: the single process's reduction of one term)
  std::vector<float> scaled = values(0, 6);
  for (float& v : scaled) v *= 0.3f;
  EXPECT_EQ(lt::all_reduce(x, "sum", 0.3).to_vector<float>(), scaled);
  EXPECT_EQ(lt::reduce_scatter(x, "sum", 0.3).to_vector<float>(), scaled);
}

TEST(Dist, RanksThatTraceDifferentCollectivesFailClearly) {
  for (int variant = 0; variant < 3; ++variant)
    expect_error(
        [&] {
          lt::dist::run_threads(2, [&](int r) {
            lt::Tensor x = lt::ones({r == 1 && variant == 0 ? 5 : 4});
            lt::Tensor y = lt::all_reduce(x, r == 1 && variant == 1 ? "max" : "sum");
            if (r == 1 && variant == 2) y = lt::all_gather(y);  // one collective more
            y.to_vector<float>();
          });
        },
        {"[sync] the ranks' graphs issue different collectives", "rank 1's",
         "whose collectives are: all_reduce"});
  // the text says what the signature holds: a root, a scale (a mean is a scaled sum)
  std::mutex mu;
  std::vector<std::string> said(2);
  lt::dist::run_threads(2, [&](int r) {
    try {
      lt::Tensor x = lt::broadcast(lt::ones({4}), r) + lt::all_reduce(lt::ones({4}), "mean");
      x.to_vector<float>();
    } catch (const lt::Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      said[size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string want = "broadcast from rank " + std::to_string(r) + " float32[4]";
    EXPECT_NE(said[size_t(r)].find(want), std::string::npos) << said[size_t(r)];
    EXPECT_NE(said[size_t(r)].find("all_reduce sum x 0.5 float32[4]"), std::string::npos)
        << said[size_t(r)];
  }
}

TEST(Dist, ABarrierAgainstACollectiveFailsClearly) {
  expect_error(
      [] {
        lt::dist::run_threads(2, [](int r) {
          if (r == 0)
            lt::dist::barrier();
          else
            lt::all_reduce(lt::ones({4})).to_vector<float>();
        });
      },
      {"the ranks issue different collectives", "barrier"});
}

TEST(Dist, GraphsMayDifferAroundTheSameCollectives) {
  lt::dist::run_threads(2, [](int r) {
    lt::Tensor x = lt::ones({4});
    if (r == 1) x = lt::exp(x * 3.f);  // a different graph around the same all_reduce
    const float want = 1.f + std::exp(3.f);
    for (float v : lt::all_reduce(x).to_vector<float>()) EXPECT_FLOAT_EQ(v, want);
  });
}

TEST(Dist, ARankThatStopsEndsInATimeoutNotAHang) {
  lt::dist::set_timeout(0.5);
  expect_error(
      [] {
        lt::dist::run_threads(2, [](int r) {
          if (r == 0) lt::all_reduce(lt::ones({4})).to_vector<float>();
        });
      },
      {"[sync]", "checking that every rank's graph issues the same collectives", "waited 0.5 s"});
  lt::dist::set_timeout(300);
}

// The timeout is read at each wait: set by a rank inside run_threads, it applies there; and
// rank 0, which runs on the caller's thread, leaves the caller's batch rows as they were.
TEST(Dist, RunThreadsReadsTheTimeoutThenAndKeepsTheCallersBatchRows) {
  lt::dist::set_timeout(300);
  lt::set_batch_rows({});
  const auto start = std::chrono::steady_clock::now();
  expect_error(
      [] {
        lt::dist::run_threads(2, [](int r) {
          lt::dist::set_timeout(0.3);
          (void)lt::dist::shard(8);
          if (r == 0) lt::all_reduce(lt::ones({4})).to_vector<float>();
        });
      },
      "waited 0.3 s");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60);
  lt::dist::set_timeout(300);
  const lt::BatchRows rows = lt::batch_rows();
  EXPECT_EQ(rows.count, 0);
  EXPECT_EQ(rows.total, 0);
}

// Rank 0 runs on the caller's thread, so the caller's pending tensors are its own. A rank
// whose graph reads one while rank 0's sync computes it (and waits in a collective for that
// rank) computes it itself instead of waiting for rank 0: waiting hung both.
TEST(Dist, ARankReadingRankZerosPendingTensorDoesNotWaitForIt) {
  lt::dist::set_timeout(20);
  const lt::Tensor shared = lt::arange(0, 8, 1, lt::DType::float32) * 2.0f;  // pending: 56
  std::vector<float> got(2);
  lt::dist::run_threads(2, [&](int r) {
    if (r == 1)  // rank 0 is in its collective by now, with `shared` among its roots
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const lt::Tensor sum = lt::all_reduce(lt::sum(shared) * (r + 1.0f));
    lt::sync();  // every pending tensor of this thread: rank 0's include `shared`
    got[static_cast<size_t>(r)] = sum.item<float>();
  });
  lt::dist::set_timeout(300);
  EXPECT_EQ(got, (std::vector<float>{56 * 3, 56 * 3}));
}

// ... and rank 0's run, which another rank may then compute beside it, writes into none of
// its inputs: here y = 2x + 1 with x held only by y's graph, which rank 0's run would
// otherwise overwrite with y while rank 1 reads x (1 in 3 trials read a wrong y).
TEST(Dist, ARankComputingRankZerosRootReadsItsInputsIntact) {
  for (int trial = 0; trial < 16; ++trial) {
    lt::Tensor x = lt::rand({int64_t{1} << 21});
    const std::vector<float> xs = x.to_vector<float>();
    const lt::Tensor y = x * 2.0f + 1.0f;  // pending, this thread's (rank 0's)
    x = lt::Tensor();
    std::vector<std::vector<float>> got(2);
    lt::dist::run_threads(2, [&](int r) {
      const lt::Tensor s = lt::all_reduce(lt::ones({4}));
      if (r == 0) lt::sync({y, s});  // y a root of a run with a collective
      (void)s.to_vector<float>();
      got[static_cast<size_t>(r)] = y.to_vector<float>();
    });
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < xs.size(); i += 997)
        ASSERT_EQ(got[static_cast<size_t>(r)][i], xs[i] * 2.0f + 1.0f)
            << "trial " << trial << ", rank " << r << ", element " << i;
  }
}

// 16-bit floats are summed in float32 and rounded once (as the MPI ranks sum them), not
// rounded after each rank's term: 1024 + 0.5 + 0.5 is 1025 in float16, not 1024; a scale
// applies before that rounding too.
TEST(Dist, SixteenBitFloatsAreSummedInFloat32) {
  for (lt::DType dt : {lt::DType::float16, lt::DType::bfloat16})
    lt::dist::run_threads(3, [&](int r) {
      const float big = dt == lt::DType::float16 ? 1024.f : 128.f;  // spacing 1 there
      const lt::Tensor x = lt::astype(lt::full({2}, r == 0 ? big : 0.5f), dt);
      for (float v : lt::astype(lt::all_reduce(x), lt::DType::float32).to_vector<float>())
        EXPECT_EQ(v, big + 1.f) << lt::dtype_name(dt);
    });
  // and a mean's scale applies to the float32 sum before the one rounding: bfloat16's mean
  // of 130, 0.25 and 0.25 is 130.5 / 3 = 43.5, where rounding the sum first (to 130) gives
  // 43.25
  lt::dist::run_threads(3, [&](int r) {
    const lt::Tensor x = lt::astype(lt::full({2}, r == 0 ? 130.f : 0.25f), lt::DType::bfloat16);
    for (const char* op : {"all_reduce", "reduce_scatter"}) {
      const lt::Tensor y = op[0] == 'a' ? lt::all_reduce(x, "mean")
                                        : lt::reduce_scatter(lt::concat({x, x, x}, 0), "mean");
      for (float v : lt::astype(y, lt::DType::float32).to_vector<float>())
        EXPECT_EQ(v, 43.5f) << op;
    }
  });
}

// The queue a rank's started collectives run on: in the order started, on a thread of its
// own (or in place, for a transport that allows one thread only); an error fails the work
// after it until reset().
TEST(Dist, CollectiveQueueRunsWorkInOrderAndKeepsItsFirstError) {
  for (bool threaded : {true, false}) {
    lt::runtime::CollectiveQueue q(threaded);
    std::vector<int> ran;
    std::vector<bool> here;
    int64_t last = 0;
    for (int i = 0; i < 50; ++i)
      last = q.start([&, i, caller = std::this_thread::get_id()] {
        ran.push_back(i);
        here.push_back(std::this_thread::get_id() == caller);
      });
    EXPECT_EQ(last, 50);
    q.wait(last);
    ASSERT_EQ(ran.size(), 50u);
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(ran[static_cast<size_t>(i)], i);
      EXPECT_EQ(here[static_cast<size_t>(i)], !threaded);
    }
    if (threaded) {
      const int64_t failed = q.start([] { lt::fail("test", "the exchange failed"); });
      bool after = false;
      q.start([&] { after = true; });
      expect_error([&] { q.wait(failed); }, {"the exchange failed"});
      expect_error([&] { q.finish(); }, {"the exchange failed"});
      EXPECT_FALSE(after);  // out of step with the other ranks: not run
      q.reset();
      q.wait(q.start([&] { after = true; }));
      EXPECT_TRUE(after);
    } else {
      expect_error([&] { q.start([] { lt::fail("test", "the exchange failed"); }); },
                   {"the exchange failed"});
    }
  }
}

// A step that fails after a collective was started (overlap_collectives) waits for it before
// the error leaves the run: the rank's next collectives work, on every rank.
TEST(Dist, AFailedRunFinishesTheCollectivesItStarted) {
  lt::dist::run_threads(2, [](int r) {
    const lt::Tensor x = lt::tensor(std::vector<float>(4, float(r + 1)), {4});
    const lt::Tensor logits = lt::ones({2, 3});
    const lt::Tensor bad = lt::tensor(std::vector<int64_t>{0, 1}, {2}) + int64_t{5};
    const lt::Tensor loss = lt::nn::cross_entropy(logits, bad) + lt::sum(lt::all_reduce(x));
    // the all-reduce starts first; the targets' check fails before its wait
    const std::string program = lt::debug::to_program({loss});
    const size_t start = program.find("all_reduce #0 started"),
                 check = program.find("check_targets"), wait = program.find("wait for all_reduce");
    EXPECT_LT(start, check) << program;
    EXPECT_LT(check, wait) << program;
    EXPECT_NE(wait, std::string::npos) << program;
    expect_error([&] { loss.item<float>(); }, {"[cross_entropy]", "target 5"});
    for (float v : lt::all_reduce(x * 2.f).to_vector<float>()) EXPECT_EQ(v, 6.f);
  });
}

TEST(Dist, ARankThatThrowsFailsTheOthers) {
  expect_error(
      [] {
        lt::dist::run_threads(3, [](int r) {
          if (r == 2) lt::fail("test", "rank 2 gives up");
          lt::all_reduce(lt::ones({4})).to_vector<float>();
        });
      },
      {"rank 2 gives up"});
}

TEST(Dist, MistakesAreErrors) {
  lt::dist::run_threads(2, [](int) {
    expect_error(
        [] {
          lt::reduce_scatter(lt::ones({3, 2}));
        },
        {"[reduce_scatter]", "dim 0 of shape [3, 2]", "2 ranks"});
    expect_error([] { lt::all_gather(lt::ones({})); }, {"[all_gather]", "0-d"});
    expect_error([] { lt::all_reduce(lt::ones({2}), "prod"); },
                 {"[all_reduce]", "unknown reduction 'prod'"});
    expect_error([] { lt::all_reduce(lt::arange(4), "mean"); },
                 {"[all_reduce]", "'mean' needs a floating tensor", "i64[4]"});
    expect_error([] { lt::all_reduce(lt::arange(4), "sum", 0.5); },
                 {"[all_reduce]", "scale", "floating"});
    expect_error([] { lt::broadcast(lt::ones({2}), 2); }, {"[broadcast]", "root 2", "2 ("});
    lt::Tensor w = lt::ones({2}).requires_grad_();
    expect_error([&] { lt::broadcast(w); }, {"[broadcast]", "not differentiable"});
    expect_error([&] { lt::reduce_scatter(w, "max"); },
                 {"[reduce_scatter]", "'max' is not differentiable"});
    expect_error([] { lt::dist::shard(5); }, {"[dist::shard]", "5 examples", "2 ranks"});
  });
  expect_error([] { lt::dist::run_threads(0, [](int) {}); }, {"[dist::run_threads]"});
  expect_error([] { lt::dist::set_timeout(0); }, {"[dist::set_timeout]"});
}

TEST(Dist, ShardSplitsTheGlobalBatch) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> got(4);
  lt::dist::run_threads(4, [&](int r) {
    auto s = lt::dist::shard(12);
    std::lock_guard<std::mutex> lock(mu);
    got[size_t(r)] = s;
  });
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(got[size_t(r)], (std::pair<int64_t, int64_t>{3 * r, 3 * r + 3}));
}

}  // namespace
