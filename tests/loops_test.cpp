// while_loop and fori_loop: the spec's example, values against host loops, gradients of
// fori_loop against an unrolled loop, one execution per loop, and the errors.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "expect_error.h"

namespace {

using lt::Tensor;

int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

TEST(WhileLoop, SpecCountsTo13) {
  auto cond_fn = [](const Tensor& iteri, const Tensor&) { return iteri > 0; };
  auto body_fn = [](const Tensor& iteri, const Tensor& x) {
    return std::tuple{iteri - 1, lt::add(x, lt::scalar(int64_t{1}))};
  };
  Tensor init_val = lt::scalar(int64_t{3});
  Tensor iteri = lt::scalar(int64_t{10});
  auto [i, res] = lt::while_loop(cond_fn, body_fn, std::tuple{iteri, init_val});
  EXPECT_EQ(res.item<int64_t>(), 13);
  EXPECT_EQ(i.item<int64_t>(), 0);
}

TEST(WhileLoop, DataDependentLoopMatchesAHostLoopInOneExecution) {
  // halve until at most 1, counting: the count depends on the data
  std::vector<float> start{1000.0f, 3.0f, 0.5f};
  auto cond_fn = [](const Tensor& x, const Tensor&) { return lt::amax(x) > 1.0; };
  auto body_fn = [](const Tensor& x, const Tensor& n) {
    return std::tuple{lt::where(x > 1.0, x * 0.5, x), n + 1};
  };
  Tensor x0 = lt::tensor(start, {3});
  lt::sync({x0});
  const int64_t runs = counter("ExecuteCount"), reads = counter("TransferToHostCount");
  auto [x, n] = lt::while_loop(cond_fn, body_fn, std::tuple{x0, lt::scalar(int64_t{0})});
  lt::sync({x, n});
  EXPECT_EQ(counter("ExecuteCount") - runs, 1) << "the whole loop is one execution";
  EXPECT_EQ(counter("TransferToHostCount") - reads, 0)
      << "no value returns to the host per iteration";
  std::vector<float> ref = start;
  int64_t count = 0;
  while (*std::max_element(ref.begin(), ref.end()) > 1.0f) {
    for (float& v : ref) v = v > 1.0f ? v * 0.5f : v;
    ++count;
  }
  EXPECT_EQ(x.to_vector<float>(), ref);
  EXPECT_EQ(n.item<int64_t>(), count);
  EXPECT_EQ(count, 10);
}

// A loop that never ends stops at lt::interrupt() (a signal handler's call) or when the
// interrupt check says so (Python's Ctrl-C), with lt::Interrupted; the library runs on.
std::atomic<int> g_checks{0};

TEST(WhileLoop, ALoopThatNeverEndsStopsWhenInterrupted) {
  auto forever = [] {
    return lt::while_loop([](const Tensor& i) { return i >= 0; },
                          [](const Tensor& i) { return i + 1; }, lt::scalar(int64_t{0}));
  };
  g_checks = 0;
  lt::set_interrupt_check([] { return ++g_checks >= 3; });  // about 0.75 s in
  expect_error([&] { (void)forever().item<int64_t>(); },
               {"[while_loop] interrupted after", "iterations", "not computed"});
  EXPECT_EQ(g_checks.load(), 3);
  lt::set_interrupt_check(nullptr);
  lt::interrupt();  // made before a loop starts: that loop is not stopped by it
  EXPECT_EQ(lt::while_loop([](const Tensor& i) { return i < 5; },
                           [](const Tensor& i) { return i + 1; }, lt::scalar(int64_t{0}))
                .item<int64_t>(),
            5);
  std::atomic<bool> stopped{false};
  std::thread stop([&] {  // again until it lands (one made before the loop starts does not)
    while (!stopped) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      lt::interrupt();
    }
  });
  EXPECT_THROW((void)forever().item<int64_t>(), lt::Interrupted);
  stopped = true;
  stop.join();

  // an input no one else holds is given to the run for its results: stopped midway, the
  // run may have written it, so a later sync that needs it is an error, not a wrong value
  Tensor out;
  {
    Tensor start = lt::tensor(std::vector<int64_t>{0, 0, 0, 0}, {4});
    (void)start.to_vector<int64_t>();  // a buffer of its own, held by `start` alone
    out = lt::while_loop([](const Tensor& i) { return lt::amax(i) >= 0; },
                         [](const Tensor& i) { return i + 1; }, start);
  }
  g_checks = 0;
  lt::set_interrupt_check([] { return ++g_checks >= 2; });
  EXPECT_THROW((void)out.to_vector<int64_t>(), lt::Interrupted);
  lt::set_interrupt_check(nullptr);
  expect_error([&] { (void)out.to_vector<int64_t>(); },
               {"[sync]", "i64[4]", "was lost", "interrupted or failed"});
}

TEST(WhileLoop, ZeroIterationsAndSingleTensorCarry) {
  auto [x, n] = lt::while_loop([](const Tensor& x, const Tensor&) { return lt::amax(x) > 5.0; },
                               [](const Tensor& x, const Tensor& n) {
                                 return std::tuple{x * 0.0, n + 1};
                               },
                               std::tuple{lt::tensor({1.0f, 2.0f}), lt::scalar(int64_t{7})});
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>({1, 2}));
  EXPECT_EQ(n.item<int64_t>(), 7);
  Tensor w = lt::tensor({3.0f});  // closed over: a loop invariant
  Tensor y = lt::while_loop([](const Tensor& v) { return lt::sum(v) < 100.0; },
                            [&](const Tensor& v) { return v * w; }, lt::tensor({1.0f, 1.0f}));
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>({81, 81}));
}

TEST(WhileLoop, RandomOpsDrawNewNumbersEachIteration) {
  using C = std::tuple<Tensor, Tensor, Tensor>;
  auto [i, a, b] =
      lt::while_loop([](const Tensor& i, const Tensor&, const Tensor&) { return i < 2; },
                     [](const Tensor& i, const Tensor& a, const Tensor&) {
                       return C{i + 1, lt::rand({6}), a};  // b: the previous iteration's draw
                     },
                     C{lt::scalar(int64_t{0}), lt::zeros({6}), lt::zeros({6})});
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(b.to_vector<float>(), std::vector<float>(6, 0.0f));
}

TEST(ForiLoop, IntegerBoundsMatchAnUnrolledLoopWithGradients) {
  Tensor w = lt::tensor({0.5f, -1.0f, 2.0f});
  Tensor init = lt::tensor({1.0f, 2.0f, 3.0f});
  w.requires_grad_();
  init.requires_grad_();
  auto body = [&](const Tensor& i, const Tensor& c) {
    return lt::tanh(c * w) + lt::astype(i, lt::DType::float32);
  };
  Tensor ref = init;
  for (int64_t i = 2; i < 7; ++i) ref = body(lt::scalar(i), ref);
  auto ref_grads = lt::autograd::grad({lt::sum(ref)}, {init, w});
  Tensor out = lt::fori_loop(2, 7, body, init);
  std::vector<float> a = out.to_vector<float>(), b = ref.to_vector<float>();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5);
  auto grads = lt::autograd::grad({lt::sum(out)}, {init, w});
  for (size_t g = 0; g < 2; ++g) {
    std::vector<float> x = grads[g].to_vector<float>(), y = ref_grads[g].to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], y[k], 1e-5) << g;
  }
  // lower >= upper: no iterations
  EXPECT_EQ(lt::fori_loop(5, 5, body, init).to_vector<float>(), init.to_vector<float>());
  EXPECT_EQ(lt::fori_loop(7, 2, body, init).to_vector<float>(), init.to_vector<float>());
}

// Bounds past 2^53 (not doubles): i counts exactly, in int64.
TEST(ForiLoop, IntegerBoundsPastTwoToThe53AreExact) {
  const int64_t lower = (int64_t{1} << 53) + 1;
  auto body = [&](const Tensor& i, const Tensor& c) { return c + (i - lt::scalar(lower)); };
  Tensor out = lt::fori_loop(lower, lower + 3, body, lt::scalar(int64_t{0}));
  EXPECT_EQ(out.item<int64_t>(), 0 + 1 + 2);
}

// A while loop's body and cond run their loop-invariant steps (tables made from arange)
// once, before the first iteration; every iteration still reads them.
TEST(WhileLoop, LoopInvariantStepsRunOnceAndEveryIterationReadsThem) {
  auto cond_fn = [](const Tensor& x, const Tensor& n) {
    Tensor limit = lt::amax(lt::exp(lt::arange(0, 4, 1, lt::DType::float32) * 0.5) + 2.0);
    return lt::astype(lt::amax(x) < limit * 10.0, lt::DType::float32) *
               lt::astype(n < 50, lt::DType::float32) >
           0.5;
  };
  auto body_fn = [](const Tensor& x, const Tensor& n) {
    Tensor table = lt::sin(lt::arange(0, 6, 1, lt::DType::float32) * 0.3) + 1.0;  // [6]
    Tensor wide = lt::unsqueeze(x, 1) * table;                                    // [3, 6]
    return std::tuple{lt::sum(wide, {1}) * 0.25 + 0.1, n + 1};
  };
  const std::vector<float> start{0.5f, 1.0f, 2.0f};
  auto [x, n] =
      lt::while_loop(cond_fn, body_fn, std::tuple{lt::tensor(start, {3}), lt::scalar(int64_t{0})});
  EXPECT_NE(lt::debug::to_program({x, n}).find("run once"), std::string::npos)
      << lt::debug::to_program({x, n});
  double table_sum = 0, limit = 0;
  for (int i = 0; i < 6; ++i) table_sum += std::sin(i * 0.3f) + 1.0;
  for (int i = 0; i < 4; ++i) limit = std::max(limit, std::exp(i * 0.5) + 2.0);
  std::vector<double> ref(start.begin(), start.end());
  int64_t count = 0;
  while (*std::max_element(ref.begin(), ref.end()) < limit * 10 && count < 50) {
    for (double& v : ref) v = v * table_sum * 0.25 + 0.1;
    ++count;
  }
  EXPECT_EQ(n.item<int64_t>(), count);
  ASSERT_GT(count, 2);
  const std::vector<float> got = x.to_vector<float>();
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])));
}

TEST(ForiLoop, TensorBoundsRunAsAWhileLoop) {
  auto body = [](const Tensor& i, const Tensor& c) {
    return c + lt::astype(i * i, lt::DType::float32);
  };
  Tensor lo = lt::tensor({2}), hi = lt::tensor({6});
  Tensor out = lt::fori_loop(lo, hi, body, lt::tensor({0.0f}));
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>({4 + 9 + 16 + 25}));
  EXPECT_EQ(lt::fori_loop(hi, lo, body, lt::tensor({1.0f})).to_vector<float>(),
            std::vector<float>({1}));
  expect_error([&] { lt::fori_loop(lt::tensor({2.0f}), hi, body, lt::tensor({0.0f})); },
               {"[fori_loop]", "int64 scalars", "f32[1]"});
}

TEST(WhileLoopErrors, CondMustBeABoolScalar) {
  auto body = [](const Tensor& x) { return x + 1.0; };
  expect_error([&] { lt::while_loop([](const Tensor& x) { return x; }, body, lt::tensor({1.0f})); },
               {"[while_loop]", "cond_fn must return a bool scalar tensor", "got f32[1]"});
  expect_error(
      [&] {
        lt::while_loop([](const Tensor& x) { return x > 0.0; }, body, lt::tensor({1.0f, 2.0f}));
      },
      {"[while_loop]", "bool scalar", "got bool[2]"});
}

TEST(WhileLoopErrors, BodyMustKeepShapesAndDtypes) {
  auto cond = [](const Tensor& x, const Tensor&) { return lt::sum(x) < 10.0; };
  expect_error(
      [&] {
        lt::while_loop(
            cond,
            [](const Tensor& x, const Tensor& y) {
              return std::tuple{x + 1.0, lt::astype(y, lt::DType::float16)};
            },
            std::tuple{lt::tensor({1.0f}), lt::tensor({1.0f})});
      },
      {"[while_loop]", "[1]: f32[1] became [1]: f16[1]"});
  expect_error(
      [&] {
        lt::while_loop(
            cond,
            [](const Tensor& x, const Tensor& y) {
              return std::tuple{lt::concat({x, x}, 0), y};
            },
            std::tuple{lt::tensor({1.0f}), lt::tensor({1.0f})});
      },
      {"[while_loop]", "[0]: f32[1] became [0]: f32[2]"});
}

TEST(WhileLoopErrors, ReverseModeSuggestsForiLoopOrScan) {
  Tensor x = lt::tensor({1.0f});
  x.requires_grad_();
  Tensor y = lt::while_loop([](const Tensor& v) { return lt::sum(v) < 10.0; },
                            [](const Tensor& v) { return v * 2.0; }, x);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>({16}));  // the forward works
  expect_error([&] { lt::sum(y).backward(); },
               {"[while_loop]", "reverse-mode", "not supported", "fori_loop", "scan"});
}

}  // namespace
