// Tensors shared between threads: recording on several threads, syncing one thread's
// tensors on another, dropping them anywhere.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cache_topology.h"
#include "runtime/thread_pool.h"
#include "trace/tensor_impl.h"

namespace {

TEST(Threading, ThreadsShareWeightsAndSyncConcurrently) {
  auto w = lt::tensor(std::vector<float>(16 * 16, 0.5f), {16, 16});
  std::vector<std::thread> threads;
  std::vector<float> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      float total = 0;
      for (int step = 0; step < 200; ++step) {
        auto x = lt::full({4, 16}, static_cast<float>(t + 1));
        total += lt::sum(lt::matmul(x, w) * 0.5f).item<float>();
      }
      results[static_cast<size_t>(t)] = total;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t)  // each of 4x16 outputs is 16 * (t+1) * 0.5, halved
    EXPECT_FLOAT_EQ(results[static_cast<size_t>(t)], 200.0f * 64 * 16 * (t + 1) * 0.5f * 0.5f);
}

// A tensor made on one thread, first recorded with by several at once (the Data node
// that stands for it in graphs must be one node, made before any of them uses it).
TEST(Threading, AFreshTensorFirstUsedByManyThreadsAtOnce) {
  for (int round = 0; round < 50; ++round) {
    auto w = lt::tensor(std::vector<float>(8 * 8, static_cast<float>(round)), {8, 8});
    std::atomic<int> ready{0};
    std::vector<float> got(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        ++ready;
        while (ready.load() < 4) std::this_thread::yield();
        auto x = lt::full({2, 8}, static_cast<float>(t + 1));
        got[static_cast<size_t>(t)] = lt::sum(lt::matmul(x, w)).item<float>();
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t)  // 2 x 8 outputs, each 8 * (t + 1) * round
      ASSERT_FLOAT_EQ(got[static_cast<size_t>(t)], 16.0f * 8 * (t + 1) * round) << round;
  }
}

TEST(Threading, APendingTensorMayBeDroppedOrSyncedOnAnotherThread) {
  lt::Tensor made_elsewhere, dropped_here;
  std::thread([&] {
    auto x = lt::tensor({1.0f, 2.0f});
    made_elsewhere = x * 3.0f;
    dropped_here = lt::exp(x);
  }).join();
  EXPECT_TRUE(made_elsewhere.is_pending());
  dropped_here = lt::Tensor();  // unlinks from the other thread's list
  EXPECT_EQ(made_elsewhere.to_vector<float>(), (std::vector<float>{3, 6}));
  auto mine = lt::tensor({1.0f}) + 1.0f;
  lt::sync();  // this thread's list only
  EXPECT_EQ(mine.item<float>(), 2.0f);
}

// A thread that records and ends frees its list of pending tensors, unless a pending
// tensor it recorded still lives (which then keeps it); a server spawning a thread per
// request holds nothing per past thread.
TEST(Threading, EndedThreadsHoldNoListOfPendingTensors) {
  (void)lt::ones({1}).to_vector<float>();
  const size_t before = lt::trace::pending_lists();
  for (int i = 0; i < 50; ++i)
    std::thread([i] {
      auto x = lt::tensor({1.0f, static_cast<float>(i)});
      EXPECT_EQ((x * 2.0f).to_vector<float>()[1], 2.0f * static_cast<float>(i));
      auto dropped = lt::exp(x);  // pending at the end of the thread, then freed
    }).join();
  EXPECT_EQ(lt::trace::pending_lists(), before);
  lt::Tensor kept;
  std::thread([&] { kept = lt::tensor({2.0f}) * 3.0f; }).join();
  EXPECT_EQ(lt::trace::pending_lists(), before + 1);
  EXPECT_EQ(kept.item<float>(), 6.0f);
}

// A detached thread still syncing when the process exits: the exit handlers (libxsmm's and
// MPI's finalizers, and oneDNN's, registered at its first use, among them) run with no
// kernel in flight, so the process ends with the status it exits with (before, it crashed
// about one time in three; with oneDNN chosen for the product, about one in 200 under load).
// Each run is a new process (gtest's "threadsafe" death tests re-run the binary).
TEST(Threading, ADetachedThreadSyncingWhenTheProcessExitsLetsItEndCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int run = 0; run < 4; ++run)
    EXPECT_EXIT(
        {
          std::atomic<int> steps{0};
          std::thread([&steps] {
            auto w = lt::full({128, 128}, 0.01f);
            auto x = lt::ones({64, 128});
            for (;;) {
              x = lt::tanh(lt::matmul(x, w)) + 1.0f;
              x.to_vector<float>();
              steps.fetch_add(1);
            }
          }).detach();
          while (steps.load() < 3) std::this_thread::yield();
          std::exit(3);
        },
        testing::ExitedWithCode(3), "");
}

// Parallel regions back to back, from several threads at once, some of whose chunks throw
// (the first chunk, or every chunk): every region covers its range exactly once, a region
// rethrows one of its own chunks' exceptions and no other, and the pool goes on (it reuses
// its per-region state).
TEST(Threading, ParallelRegionsBackToBackEachCoverTheirRangeAndKeepTheirErrors) {
  namespace rt = lazytrace::runtime;
  auto regions = [](int seed, int& thrown) {
    for (int r = 0; r < 2000; ++r) {
      const int64_t n = 1 + (r * 7919 + seed) % 5000;
      std::vector<int> hits(static_cast<size_t>(n), 0);
      const bool fails = r % 13 == 5;
      try {
        rt::parallel_for(n, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
          if (fails && (b == 0 || r % 2 == 0))
            throw std::runtime_error("region " + std::to_string(r));
        });
        EXPECT_FALSE(fails) << "region " << r << " did not rethrow its chunk's error";
      } catch (const std::runtime_error& e) {
        EXPECT_TRUE(fails) << "region " << r << " rethrew " << e.what();
        EXPECT_EQ(std::string(e.what()), "region " + std::to_string(r));
        ++thrown;
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "region " << r << ", item " << i;
    }
  };
  int thrown_here = 0, thrown_there = 0;
  std::thread other([&] { regions(3, thrown_there); });
  regions(0, thrown_here);
  other.join();
  EXPECT_EQ(thrown_here, 154);  // regions 5, 18, ... below 2000
  EXPECT_EQ(thrown_there, 154);
}

// A background session (how a scan runs its optimizer updates beside its iterations): every
// task runs once, never before it is published, on whichever thread waits; one session at
// a time, on any user thread; finish returns when all have run.
TEST(Threading, BackgroundTasksRunOnceEachOnlyOncePublished) {
  namespace rt = lazytrace::runtime;
  const int64_t n = 400;
  std::vector<std::atomic<int>> ran(n);
  std::atomic<int64_t> published{0}, early{0};
  const std::function<void(int64_t)> task = [&](int64_t t) {
    if (t >= published.load()) ++early;
    ran[static_cast<size_t>(t)].fetch_add(1);
    volatile double x = 0;  // a little work, so that several threads take part
    for (int i = 0; i < 2000; ++i) x = x + i;
  };
  ASSERT_TRUE(rt::Background::begin(task));
  EXPECT_FALSE(rt::Background::begin(task));  // one session at a time
  std::thread other([&] { EXPECT_FALSE(rt::Background::begin(task)); });
  other.join();
  std::vector<double> out(1 << 16);
  for (int64_t g = 0; g < 10; ++g) {
    published = (g + 1) * 20;
    rt::Background::publish(published);
    // the caller's own parallel work, while the pool's threads wait for it or for the next
    rt::parallel_for(static_cast<int64_t>(out.size()), 1024, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = std::sqrt(double(i) + g);
    });
  }
  // the caller takes tasks until no more than 5 wait
  published = n - 20;
  rt::Background::publish(published);
  rt::Background::catch_up(5);
  int64_t taken = 0;
  for (int64_t t = 0; t < n; ++t) taken += ran[static_cast<size_t>(t)].load() > 0;
  EXPECT_GE(taken, published.load() - 5 - rt::num_threads());  // (workers may be mid-task)
  published = n;
  rt::Background::finish(n);
  EXPECT_EQ(early.load(), 0);
  for (int64_t t = 0; t < n; ++t) ASSERT_EQ(ran[static_cast<size_t>(t)].load(), 1) << t;
  EXPECT_DOUBLE_EQ(out[100], std::sqrt(109.0));
  // another session may start now, on any thread
  std::thread next([&] {
    std::atomic<int> count{0};
    const std::function<void(int64_t)> count_task = [&](int64_t) { ++count; };
    ASSERT_TRUE(rt::Background::begin(count_task));
    rt::Background::finish(7);
    EXPECT_EQ(count.load(), 7);
  });
  next.join();
}

// While published tasks wait for a thread, the caller's parallel work runs on the caller
// alone (the other threads are busy with the tasks, and no step should wait for them); a
// worker asleep when tasks are published wakes up for them.
TEST(Threading, ParallelWorkRunsInlineWhileBackgroundTasksWait) {
  namespace rt = lazytrace::runtime;
  if (rt::num_threads() < 2) GTEST_SKIP() << "one thread: no worker to run the tasks";
  const int64_t n = rt::num_threads() + 1;  // more than the workers: some stay waiting
  std::atomic<bool> release{false};
  std::atomic<int64_t> ran{0};
  const std::function<void(int64_t)> blocking = [&](int64_t) {
    while (!release.load()) std::this_thread::yield();
    ++ran;
  };
  ASSERT_TRUE(rt::Background::begin(blocking));
  rt::Background::publish(n);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  rt::parallel_for(1 << 20, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) ++elsewhere;
  });
  EXPECT_EQ(elsewhere.load(), 0);
  release = true;
  rt::Background::finish(n);
  EXPECT_EQ(ran.load(), n);

  // the workers fall asleep (they spin about half a millisecond), then tasks arrive
  ran = 0;
  const std::function<void(int64_t)> count = [&](int64_t) { ++ran; };
  ASSERT_TRUE(rt::Background::begin(count));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  rt::Background::publish(5);
  for (int i = 0; i < 2000 && ran.load() < 5; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 5) << "a sleeping worker did not wake up for published tasks";
  rt::Background::finish(5);
}

// A session that does not hold the threads (short tasks: a loop's read-ahead) lets them
// join the caller's parallel work between two of its tasks.
TEST(Threading, ParallelWorkGetsTheThreadsOfASessionOfShortTasks) {
  namespace rt = lazytrace::runtime;
  if (rt::num_threads() < 2) GTEST_SKIP() << "one thread: no worker to run the tasks";
  const int64_t n = 100000;
  std::atomic<int64_t> ran{0};
  const std::function<void(int64_t)> short_task = [&](int64_t) {
    volatile double x = 0;
    for (int i = 0; i < 2000; ++i) x = x + i;
    ++ran;
  };
  ASSERT_TRUE(rt::Background::begin(short_task, /*hold_threads=*/false));
  rt::Background::publish(n);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  rt::parallel_for(1 << 20, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) {
      ++elsewhere;
      return;
    }
    // the caller's chunks wait (up to 2 s) for a worker to take one
    for (int i = 0; i < 2000 && elsewhere.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_GT(elsewhere.load(), 0) << "no worker joined the parallel work between short tasks";
  rt::Background::finish(n);
  EXPECT_EQ(ran.load(), n);
}

// threads_share_cache measures a round trip with a worker and answers; inside a parallel
// region, and while a session's tasks hold the threads, it answers without measuring (it
// would wait for a thread that cannot come: a hang here is ctest's timeout); with one thread, or
// LAZYTRACE_SHARED_CACHE=1, the answer is yes, and LAZYTRACE_SHARED_CACHE=0 says no.
TEST(Threading, ThreadsShareCacheAnswersWithoutWaitingForBusyThreads) {
  namespace rt = lazytrace::runtime;
  const char* forced = std::getenv("LAZYTRACE_SHARED_CACHE");
  const bool first = lazytrace::cpu::threads_share_cache();
  if (forced != nullptr) {
    EXPECT_EQ(first, forced[0] == '1');
  } else if (rt::num_threads() < 2) {
    EXPECT_TRUE(first);
  }
  rt::parallel_for(2, 1, [&](int64_t, int64_t) { (void)lazytrace::cpu::threads_share_cache(); });
  std::atomic<bool> release{false};
  const std::function<void(int64_t)> blocking = [&](int64_t) {
    while (!release.load()) std::this_thread::yield();
  };
  ASSERT_TRUE(rt::Background::begin(blocking));
  rt::Background::publish(rt::num_threads() + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past the 100 ms it keeps
  (void)lazytrace::cpu::threads_share_cache();
  release = true;
  rt::Background::finish(rt::num_threads() + 1);
}

}  // namespace

namespace {

// A long sync on another thread: a loop of `n` iterations in the backend, started once
// its graph has compiled (a sync holds no lock while it compiles and runs).
struct LongSync {
  std::atomic<bool> done{false};
  lt::Tensor result;  // recorded here, synced by the thread
  std::thread thread;
  explicit LongSync(int64_t n) {
    result = lt::fori_loop(
        0, n, [](const lt::Tensor&, const lt::Tensor& c) { return c + 1; }, lt::scalar(int64_t{0}));
    const int64_t compiles = lt::metrics::counter("CompileCount");
    thread = std::thread([this] {
      lt::sync({result});
      done = true;
    });
    while (lt::metrics::counter("CompileCount") == compiles && !done)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

}  // namespace

TEST(Threading, SyncsOnDifferentThreadsRunAtOnce) {
  LongSync other(10'000'000);
  ASSERT_FALSE(other.done) << "the loop ended before this thread synced: make it longer";
  for (int k = 0; k < 20; ++k)
    EXPECT_EQ(lt::sum(lt::full({4}, static_cast<float>(k))).item<float>(), 4.0f * k);
  EXPECT_FALSE(other.done) << "this thread's syncs waited for the other thread's";
  other.thread.join();
  EXPECT_EQ(other.result.item<int64_t>(), 10'000'000);
}

TEST(Threading, ASyncThatReadsAnotherThreadsRunningResultWaitsForIt) {
  LongSync other(5'000'000);
  lt::Tensor y = other.result * 2 + 1;  // reads the running sync's root: waits for it
  EXPECT_EQ(y.item<int64_t>(), 10'000'001);
  other.thread.join();
  EXPECT_EQ(other.result.item<int64_t>(), 5'000'000);
}

namespace {

// Eight threads each train their own copy of one model for 1,000 steps at once, sharing the
// compile cache, the buffer cache and the thread pool: every copy ends with exactly the
// weights one thread alone computes.
TEST(Threading, EightThreadsTrainingAtOnceEachGetOneThreadsWeights) {
  const int steps = 1000;
  auto train = [steps]() {
    lt::nn::Linear a(6, 8), b(8, 3);
    {
      lt::NoGradGuard no_grad;  // the same start everywhere, whatever the random stream
      a.weight.copy_(lt::reshape(lt::arange(48, lt::float32), {8, 6}) * 0.01f - 0.2f);
      b.weight.copy_(lt::reshape(lt::arange(24, lt::float32), {3, 8}) * -0.02f + 0.2f);
      a.bias.copy_(lt::arange(8, lt::float32) * 0.01f);
      b.bias.copy_(lt::zeros({3}));
    }
    std::vector<lt::Tensor> params = a.parameters();
    for (const lt::Tensor& p : b.parameters()) params.push_back(p);
    lt::optim::AdamW opt(params, {.lr = 1e-2});
    const lt::Tensor x = lt::reshape(lt::arange(24, lt::float32), {4, 6}) * 0.1f;
    const lt::Tensor y = lt::tensor(std::vector<int64_t>{0, 2, 1, 2}, {4});
    for (int i = 0; i < steps; ++i) {
      lt::nn::cross_entropy(b(lt::tanh(a(x))), y).backward();
      opt.step();
      opt.zero_grad();
      lt::sync();
    }
    std::vector<float> w;
    for (const lt::Tensor& p : params)
      for (float v : p.to_vector<float>()) w.push_back(v);
    return w;
  };
  const std::vector<float> alone = train();
  std::vector<std::vector<float>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { got[static_cast<size_t>(t)] = train(); });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(got[static_cast<size_t>(t)], alone) << "thread " << t;
}

}  // namespace
