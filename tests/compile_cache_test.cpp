// The compile cache: a repeated step compiles once; scalars and data never recompile; a
// new shape compiles once more; the cache is bounded.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "compiler/compile_cache.h"
#include "core/lru_cache.h"

namespace {

int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

struct Mlp {
  lt::Tensor w1, b1, w2, b2, w3, b3;
  explicit Mlp(int64_t in) {
    lt::manual_seed(1);
    w1 = lt::randn({in, 32}) * 0.2f;
    b1 = lt::zeros({32});
    w2 = lt::randn({32, 32}) * 0.2f;
    b2 = lt::zeros({32});
    w3 = lt::randn({32, 4}) * 0.2f;
    b3 = lt::zeros({4});
    lt::sync();
  }
  lt::Tensor operator()(const lt::Tensor& x, float scale) const {
    auto h = lt::relu(lt::matmul(x, w1) + b1);
    h = lt::gelu(lt::matmul(h, w2) + b2) * scale;
    return lt::softmax(lt::matmul(h, w3) + b3, -1);
  }
};

std::vector<float> reference_mlp(const Mlp& m, const std::vector<float>& x, int64_t rows,
                                 int64_t in, float scale) {
  auto w1 = m.w1.to_vector<float>(), w2 = m.w2.to_vector<float>(), w3 = m.w3.to_vector<float>();
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> h1(32), h2(32), o(4);
    for (int j = 0; j < 32; ++j) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * w1[k * 32 + j];
      h1[j] = s > 0 ? s : 0;
    }
    for (int j = 0; j < 32; ++j) {
      double s = 0;
      for (int k = 0; k < 32; ++k) s += h1[k] * w2[k * 32 + j];
      h2[j] = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0))) * scale;
    }
    double mx = -1e300, z = 0;
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int k = 0; k < 32; ++k) s += h2[k] * w3[k * 4 + j];
      o[j] = s;
      mx = std::max(mx, s);
    }
    for (double& v : o) z += (v = std::exp(v - mx));
    for (double v : o) out.push_back(static_cast<float>(v / z));
  }
  return out;
}

// The one cache type behind every cache: least recently used out first, against a plain
// list of keys kept in use order.
TEST(LruCache, EvictsTheLeastRecentlyUsedAsAListInUseOrderWould) {
  lt::LruCache<int> cache(3);
  std::vector<uint64_t> order;  // most recent first, at most 3
  auto use = [&](uint64_t k) {
    order.erase(std::remove(order.begin(), order.end(), k), order.end());
    order.insert(order.begin(), k);
    if (order.size() > 3) order.pop_back();
  };
  const uint64_t keys[] = {1, 2, 3, 1, 4, 2, 5, 5, 1, 3, 3, 2};
  for (uint64_t k : keys) {
    if (int* v = cache.find(k)) {
      EXPECT_EQ(*v, static_cast<int>(k) * 10);
      ASSERT_NE(std::find(order.begin(), order.end(), k), order.end()) << k;
    } else {
      ASSERT_EQ(std::find(order.begin(), order.end(), k), order.end()) << k;
      const size_t evicted = cache.insert(k, static_cast<int>(k) * 10);
      EXPECT_EQ(evicted, order.size() == 3 ? 1u : 0u);
    }
    use(k);
    std::vector<uint64_t> held;
    cache.for_each([&](uint64_t key, int) { held.push_back(key); });
    EXPECT_EQ(held, order);
  }
  EXPECT_EQ(cache.set_capacity(1), 2u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.find(order.front()), nullptr);
  cache.insert(order.front(), 7);  // replacing keeps one entry
  EXPECT_EQ(*cache.find(order.front()), 7);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(CompileCache, RepeatedStepCompilesOnce) {
  Mlp mlp(16);
  lt::metrics::reset();
  for (int step = 0; step < 10; ++step) {
    auto x = lt::randn({8, 16});
    auto y = mlp(x, 1.5f);
    lt::sync();
    auto ref = reference_mlp(mlp, x.to_vector<float>(), 8, 16, 1.5f);
    auto got = y.to_vector<float>();
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5) << i;
  }
  EXPECT_EQ(counter("CompileCount"), 1);
  EXPECT_EQ(counter("CacheHit"), 9);
}

// clear_caches forgets every compiled graph and body program: the next step compiles again
// (a scan's body too) and computes the same values. Compiled programs hold no memory
// between runs (their arenas go back to the buffer cache), so nothing live is freed.
TEST(CompileCache, ClearCachesRecompilesAndHeldNoMemory) {
  Mlp mlp(16);
  auto x = lt::randn({8, 16});
  lt::sync({x});
  auto body = [](const lt::Tensor& c, const lt::Tensor& xs) {
    lt::Tensor h = lt::tanh(c + xs);
    return std::pair<lt::Tensor, lt::Tensor>{h, h * 2.0f};
  };
  auto run = [&] {
    auto y = mlp(x, 1.5f);
    auto [carry, ys] = lt::scan(body, lt::zeros({16}), x);
    lt::sync({y, carry});
    return std::pair{y.to_vector<float>(), carry.to_vector<float>()};
  };
  const auto first = run();
  lt::metrics::reset();
  EXPECT_EQ(run(), first);
  EXPECT_EQ(counter("CompileCount"), 0);
  const int64_t held = lt::metrics::memory_bytes();
  lt::clear_caches();
  EXPECT_EQ(lt::metrics::memory_bytes(), held) << "no program held memory between runs";
  EXPECT_EQ(run(), first);
  EXPECT_EQ(counter("CompileCount"), 1);
  EXPECT_GE(counter("BodyCompileCount"), 1);
}

TEST(CompileCache, ChangingAScalarEveryStepDoesNotRecompile) {
  Mlp mlp(16);
  auto x = lt::randn({8, 16});
  lt::sync();
  (void)mlp(x, 0.3f).to_vector<float>();
  lt::metrics::reset();
  for (int step = 0; step < 10; ++step) {
    float scale = 0.1f + 0.37f * static_cast<float>(step + 1);
    auto got = mlp(x, scale).to_vector<float>();
    auto ref = reference_mlp(mlp, x.to_vector<float>(), 8, 16, scale);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5);
  }
  EXPECT_EQ(counter("CompileCount"), 0);
}

// Equal literal constants share one scalar slot, so two copies of a computation merge; a
// graph compiled that way is reused only while they are equal (the key says which are).
TEST(CompileCache, EqualConstantsMergeAndAreReusedOnlyWhileEqual) {
  const lt::Tensor x = lt::randn({64});
  lt::sync();
  const std::vector<float> xv = x.to_vector<float>();
  auto f = [&](double a, double b) { return lt::exp(x * a) + lt::exp(x * b); };
  auto check = [&](double a, double b) {
    const std::vector<float> got = f(a, b).to_vector<float>();
    for (size_t i = 0; i < xv.size(); ++i) {
      const double want = std::exp(xv[i] * a) + std::exp(xv[i] * b);
      ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::fabs(want))) << a << " " << b << " " << i;
    }
  };
  auto instrs = [](const std::string& program) {  // "N instrs" of the one fused step
    const size_t at = program.find(" instrs");
    size_t b = at;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(program[b - 1]))) --b;
    return std::stoi(program.substr(b, at - b));
  };
  EXPECT_LT(instrs(lt::debug::to_program({f(2.5, 2.5)})),
            instrs(lt::debug::to_program({f(2.5, 3.5)})));
  lt::sync();
  lt::metrics::reset();
  check(2.5, 2.5);
  EXPECT_EQ(counter("CompileCount"), 1);
  check(2.5, 3.5);  // not the merged graph
  EXPECT_EQ(counter("CompileCount"), 2);
  check(4.0, 4.0);  // equal again: the first graph, with the new value
  check(3.0, 0.25);
  EXPECT_EQ(counter("CompileCount"), 2);
}

TEST(CompileCache, NewInputShapeCompilesOnceMore) {
  Mlp mlp(16);
  lt::metrics::reset();
  for (int rows : {8, 8, 3, 3, 8, 3}) (void)mlp(lt::randn({rows, 16}), 1.0f).to_vector<float>();
  EXPECT_EQ(counter("CompileCount"), 2);
  EXPECT_EQ(counter("CacheHit"), 4);
}

TEST(CompileCache, CacheHitAllocatesOnlyItsOutputs) {
  auto x = lt::randn({64, 64});
  auto w = lt::randn({64, 64});
  lt::sync();
  auto step = [&] {
    lt::Tensor y, z;
    {  // (a pending tensor still held at the sync would be one more result)
      auto h = lt::tanh(lt::matmul(x, w)) * 2.0f;
      y = lt::sum(h * h, {1});
      z = lt::matmul(h, w) + 1.5f;
    }
    lt::sync({y, z});
    return std::pair{y, z};
  };
  step();
  int64_t before = lt::runtime::Buffer::allocations();
  auto [y, z] = step();
  EXPECT_EQ(lt::runtime::Buffer::allocations() - before, 3);  // y, z and the run's arena
}

// A model run at many shapes (one program each) holds, between runs, only its tensors:
// each program takes its arena for a run and gives it back (kept by each program, the
// arenas of every shape stayed live: 11 GB after 32 batch sizes of a 1024-4096-1024 MLP).
TEST(CompileCache, ProgramsForManyShapesHoldNoMemoryBetweenRuns) {
  const lt::Tensor w1 = lt::randn({64, 256}), w2 = lt::randn({256, 64});
  lt::sync();
  lt::metrics::reset();
  int64_t live = -1;
  for (int64_t rows = 16; rows <= 16 * 12; rows += 16) {
    {
      const lt::Tensor x = lt::randn({rows, 64});
      const lt::Tensor y = lt::matmul(lt::relu(lt::matmul(x, w1)), w2);
      ASSERT_TRUE(std::isfinite(lt::mean(y * y).item<float>()));
    }
    if (live < 0) live = lt::metrics::memory_bytes();
    EXPECT_EQ(lt::metrics::memory_bytes(), live) << rows << " rows";
  }
  EXPECT_EQ(counter("CompileCount"), 12);
}

TEST(CompileCache, IsBoundedLeastRecentlyUsedFirst) {
  setenv("LAZYTRACE_COMPILE_CACHE_SIZE", "3", 1);
  lt::compiler::CompileCache cache;
  unsetenv("LAZYTRACE_COMPILE_CACHE_SIZE");
  EXPECT_EQ(cache.capacity(), 3u);
  lt::metrics::reset();
  // a graph of one constant, returned `results` times
  auto constant_graph = [](size_t results) {
    lt::ir::Graph g;
    lt::ir::GNode n;
    n.op = lt::ir::OpKind::Scalar;
    n.dtype = lt::float32;
    n.value = 1;
    g.nodes.push_back(n);
    g.results.assign(results, 0);
    return g;
  };
  auto compile = [&](uint64_t key) {
    return cache.get_or_compile(key, {0, 0, 1, 1}, lt::cpu::cpu_device(),
                                [&] { return constant_graph(1); });
  };
  for (uint64_t k : {1, 2, 3}) compile(k);
  compile(1);  // 1 is now the most recent; 2 the least
  compile(4);  // evicts 2
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(counter("CacheEvictions"), 1);
  lt::metrics::reset();
  compile(1);
  compile(3);
  compile(4);
  EXPECT_EQ(counter("CacheHit"), 3);
  compile(2);
  EXPECT_EQ(counter("CompileCount"), 1);
  // the same key with another argument count is a (hash) collision: compiled anew
  auto other = cache.get_or_compile(1, {0, 0, 2, 1}, lt::cpu::cpu_device(),
                                    [&] { return constant_graph(2); });
  EXPECT_EQ(counter("CompileCount"), 2);
  EXPECT_EQ(other->run({}, {}).size(), 2u);
}

}  // namespace

namespace {

// Regression: a weak node hash once let iota:i64[5] and iota:i32[4] share an executable
// (the dtype and the dim cancelled out), returning int64 bytes read as int32.
TEST(CompileCache, NearlyIdenticalGraphsNeverShareAnExecutable) {
  lt::metrics::reset();
  EXPECT_EQ(lt::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(lt::arange(4, lt::int32).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  auto x = lt::tensor({1.0f, 2.0f, 3.0f});
  for (lt::DType d : {lt::int32, lt::int64, lt::float64, lt::float16, lt::bool_})
    EXPECT_EQ(lt::astype(x, d).dtype(), d);
  EXPECT_EQ(lt::astype(x, lt::int32).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(lt::astype(x, lt::int64).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(lt::astype(x, lt::bool_).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(lt::metrics::counter("CacheHit"), 0);
}

// The compiled loop and call bodies (cpu::body_program) share the compile cache's bound.
// ctest runs this as compile_cache.body_bound with LAZYTRACE_COMPILE_CACHE_SIZE=2, read when
// the process first compiles a body; at the default bound of 1024 it has nothing to show.
TEST(BodyCache, IsBoundedLeastRecentlyUsedFirst) {
  if (lt::compiler::compile_cache_capacity() != 2)
    GTEST_SKIP() << "needs LAZYTRACE_COMPILE_CACHE_SIZE=2 (ctest: compile_cache.body_bound)";
  lt::clear_caches();
  // a loop over a carry of n elements: one body per n
  auto run = [](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
    lt::Tensor init = lt::tensor(v, {n});
    lt::Tensor out = lt::fori_loop(
        0, 3, [](const lt::Tensor&, const lt::Tensor& c) { return c * 2.0f + 1.0f; }, init);
    std::vector<float> got = out.to_vector<float>();
    for (int64_t i = 0; i < n; ++i)  // three times x -> 2x + 1: 8x + 7
      EXPECT_EQ(got[static_cast<size_t>(i)], 8.0f * static_cast<float>(i) + 7.0f) << n;
  };
  lt::metrics::reset();
  for (int64_t n : {1, 2, 3}) run(n);
  EXPECT_EQ(counter("BodyCompileCount"), 3);
  // n = 1's body was the least recently used of three, and the bound is two: compiled again,
  // once its graph (evicted from the compile cache too) is lowered again
  lt::metrics::reset();
  run(1);
  EXPECT_EQ(counter("BodyCompileCount"), 1);
  EXPECT_GE(counter("CacheEvictions"), 1);
  // n = 3's graph and body are both still cached: nothing compiles
  lt::metrics::reset();
  run(3);
  EXPECT_EQ(counter("BodyCompileCount"), 0);
  EXPECT_EQ(counter("CompileCount"), 0);
}

}  // namespace
