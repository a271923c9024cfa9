// The product kernels the CPU backend picks among (backends/cpu/gemm.h): each library against
// a float64 loop at every layout, GemmChoice's measuring and keeping, and lt::matmul with the
// choice on and off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <lazytrace/lazytrace.h>

#include "backends/cpu/gemm.h"
#include "runtime/thread_pool.h"

namespace lt = lazytrace;
namespace cpu = lazytrace::cpu;
using cpu::GemmLib;
using cpu::GemmPlan;

namespace {

std::vector<float> randoms(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// C[i, j] of a product in float64, and the sum of its terms' magnitudes: A stored [m, k] (or
// [k, m] with ta) with leading dimension lda, B [k, n] (or [n, k] with tb) with ldb.
template <typename T>
std::pair<double, double> reference(const std::vector<T>& a, bool ta, int64_t lda,
                                    const std::vector<T>& b, bool tb, int64_t ldb, int64_t i,
                                    int64_t j, int64_t k) {
  double ref = 0, mag = 0;
  for (int64_t p = 0; p < k; ++p) {
    const double x = static_cast<float>(a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)]);
    const double y = static_cast<float>(b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)]);
    ref += x * y;
    mag += std::abs(x * y);
  }
  return {ref, mag};
}

// One product by `lib`, A stored [m, k] (or [k, m] with ta), B [k, n] (or [n, k] with tb),
// each with a padded leading dimension, into a C with a padded row stride whose padding must
// stay untouched. Returns whether `lib` took it; where it did, C is checked.
bool check_product(GemmLib lib, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  const int64_t pad = 3;
  const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const std::vector<float> a = randoms(static_cast<size_t>((ta ? k : m) * lda), 1);
  const std::vector<float> b = randoms(static_cast<size_t>((tb ? n : k) * ldb), 2);
  std::vector<float> c(static_cast<size_t>(m * ldc), 7.0f);
  const cpu::GemmOperand oa{ta, lda, ta ? 1 : lda, ta ? lda : 1};
  const cpu::GemmOperand ob{tb, ldb, tb ? 1 : ldb, tb ? ldb : 1};
  const cpu::GemmArgs g{m, n, k, a.data(), oa, b.data(), ob, c.data(), ldc, nullptr, {}};
  if (!cpu::run_gemm_with(lib, g)) {
    for (float x : c) EXPECT_EQ(x, 7.0f) << "a kernel that declined wrote C";
    return false;
  }
  const std::string what = std::string(cpu::gemm_lib_name(lib)) + " " + std::to_string(m) + "x" +
                           std::to_string(k) + "@" + std::to_string(k) + "x" + std::to_string(n) +
                           (ta ? " Aᵀ" : "") + (tb ? " Bᵀ" : "");
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const auto [ref, mag] = reference(a, ta, lda, b, tb, ldb, i, j, k);
      const double got = c[static_cast<size_t>(i * ldc + j)];
      if (std::abs(got - ref) > 1e-5 * mag + 1e-6) {
        ADD_FAILURE() << what << ": C[" << i << ", " << j << "] = " << got << ", want " << ref;
        return true;
      }
    }
    for (int64_t j = n; j < ldc; ++j)
      if (c[static_cast<size_t>(i * ldc + j)] != 7.0f) {
        ADD_FAILURE() << what << ": wrote C's padding";
        return true;
      }
  }
  return true;
}

}  // namespace

TEST(GemmLibs, EveryLibraryMatchesAFloat64Loop) {
  const int64_t shapes[][3] = {{1, 1, 1},    {5, 300, 40},  {17, 33, 65},  {16, 1024, 128},
                               {64, 96, 16}, {130, 70, 24}, {33, 128, 512}};
  for (int i = 0; i < cpu::kGemmLibs; ++i) {
    const auto lib = static_cast<GemmLib>(i);
    if (!cpu::gemm_lib_available(lib)) continue;
    int taken = 0, tried = 0;
    for (const auto& s : shapes)
      for (int layout = 0; layout < 4; ++layout) {
        ++tried;
        taken += check_product(lib, s[0], s[1], s[2], layout & 1, layout & 2);
      }
    // OpenBLAS and oneDNN take every product; lazytrace's small kernels and libxsmm's JIT
    // some (lazytrace's: few rows or a short reduction; libxsmm's: not B stored transposed)
    if (lib == GemmLib::OpenBlas || lib == GemmLib::OneDnn)
      EXPECT_EQ(taken, tried) << cpu::gemm_lib_name(lib);
    else
      EXPECT_GT(taken, 0) << cpu::gemm_lib_name(lib);
  }
}

namespace {

// A product whose kernels take as long as `micros` says (0: the kernel declines it), on
// the rule's split, and as `other` says on the other split.
struct FakeProduct {
  double micros[cpu::kGemmLibs];
  std::vector<GemmLib> runs;  // the kernels run, in order
  double other[cpu::kGemmLibs] = {};
  std::vector<GemmPlan> plans = {};   // the plans run, in order
  double first[cpu::kGemmLibs] = {};  // a kernel's first run on the rule's split, where set

  bool operator()(GemmPlan plan) {
    const int lib = static_cast<int>(plan.lib);
    double us = (plan.other_split ? other : micros)[lib];
    if (us <= 0) return false;
    if (!plan.other_split && first[lib] > 0) us = std::exchange(first[lib], 0.0);
    runs.push_back(plan.lib);
    plans.push_back(plan);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
    while (std::chrono::steady_clock::now() < until) {
    }
    return true;
  }
};

GemmPlan measure(cpu::GemmChoice& choice, int64_t id, FakeProduct& p, bool splits = false) {
  return choice.measure(
      {{id, 0, 0, 0, 0, 0, 0, 0, 0}}, [&](GemmPlan plan) { return p(plan); }, splits,
      "fake " + std::to_string(id), 1e6);
}

}  // namespace

TEST(GemmChoice, KeepsTheFastestKernelAndEndsOnIt) {
  cpu::GemmChoice choice;
  // the fixed rule 600 µs; OpenBLAS 150, oneDNN 300 (where built), libxsmm declines
  FakeProduct p{{600, 150, 300, 0}, {}};
  EXPECT_EQ(measure(choice, 1, p).lib, GemmLib::OpenBlas);
  ASSERT_FALSE(p.runs.empty());
  EXPECT_EQ(p.runs.back(), GemmLib::OpenBlas) << "C must hold the kept kernel's result";
  for (GemmLib lib : p.runs) EXPECT_NE(lib, GemmLib::Xsmm) << "a declined kernel was timed";
  for (GemmPlan plan : p.plans) EXPECT_FALSE(plan.other_split) << "a product in one block";
  EXPECT_EQ(choice.find({{1, 0, 0, 0, 0, 0, 0, 0, 0}}), (GemmPlan{GemmLib::OpenBlas, false}));
  EXPECT_FALSE(choice.find({{2, 0, 0, 0, 0, 0, 0, 0, 0}}).has_value());

  // measured once: a second call runs the kept kernel once more and nothing else
  p.runs.clear();
  EXPECT_EQ(measure(choice, 1, p).lib, GemmLib::OpenBlas);
  EXPECT_EQ(p.runs, std::vector<GemmLib>{GemmLib::OpenBlas});

  const std::vector<cpu::GemmChoice::Entry> entries = choice.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].shape, "fake 1");
  EXPECT_EQ(entries[0].gflops[0][static_cast<int>(GemmLib::Xsmm)], 0.0);
  for (double g : entries[0].gflops[1]) EXPECT_EQ(g, 0.0) << "the other split was timed";
  // 1e6 flops in about 150 µs: about 6.7 GFLOP/s, never more
  EXPECT_GT(entries[0].gflops[0][static_cast<int>(GemmLib::OpenBlas)], 1.0);
  EXPECT_LT(entries[0].gflops[0][static_cast<int>(GemmLib::OpenBlas)], 6.7);
  choice.clear();
  EXPECT_TRUE(choice.entries().empty());
  EXPECT_FALSE(choice.find({{1, 0, 0, 0, 0, 0, 0, 0, 0}}).has_value());
}

// gemm_choice_cache: a plan measured by one GemmChoice (one process) is kept in its file and
// taken from there, untimed, by the next; a line cut short or naming no kernel is left out.
TEST(GemmChoice, PlansKeptInAFileAreTakenUntimedByTheNextProcess) {
  const std::string path = ::testing::TempDir() + "lazytrace_gemm_choices_" +
                           std::to_string(::getpid()) + "/choices.txt";  // its folder made too
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  auto store = [&](cpu::GemmChoice& c, int64_t id, FakeProduct& p, bool splits, bool stored) {
    return c.measure(
        {{id, 0, 0, 0, 0, 0, 0, 0, 0}}, [&](GemmPlan plan) { return p(plan); }, splits,
        "fake " + std::to_string(id), 1e6, stored);
  };
  {
    cpu::GemmChoice first;
    first.keep_in(path);
    FakeProduct p{{600, 150, 0, 0}, {}, {500, 100, 0, 0}};
    EXPECT_EQ(store(first, 1, p, true, true), (GemmPlan{GemmLib::OpenBlas, true}));
    FakeProduct q{{300, 3000, 0, 0}, {}};
    EXPECT_EQ(store(first, 2, q, false, true), (GemmPlan{GemmLib::Lazytrace, false}));
    FakeProduct r{{600, 150, 0, 0}, {}};
    EXPECT_EQ(store(first, 3, r, false, false).lib, GemmLib::OpenBlas);  // the pass off: not kept
  }
  std::ofstream(path, std::ios::app)
      << "4 0 0\n9 9 9 9 9 9 9 9 9 9 9 7 0 fake\n";  // cut; no kernel 7
  cpu::GemmChoice next;
  next.keep_in(path);
  FakeProduct p{{600, 150, 0, 0}, {}, {500, 100, 0, 0}};
  EXPECT_EQ(store(next, 1, p, true, true), (GemmPlan{GemmLib::OpenBlas, true}));
  EXPECT_EQ(p.plans, std::vector<GemmPlan>{(GemmPlan{GemmLib::OpenBlas, true})}) << "run once";
  FakeProduct q{{300, 3000, 0, 0}, {}};
  EXPECT_EQ(store(next, 2, q, false, true), (GemmPlan{GemmLib::Lazytrace, false}));
  EXPECT_EQ(q.runs.size(), 1u);
  FakeProduct w{{150, 600, 0, 0}, {}};  // its line was cut short: timed
  EXPECT_EQ(store(next, 4, w, false, true).lib, GemmLib::Lazytrace);
  EXPECT_GT(w.runs.size(), 1u);
  FakeProduct r{{150, 600, 0, 0}, {}};  // not in the file: timed
  EXPECT_EQ(store(next, 3, r, false, true).lib, GemmLib::Lazytrace);
  EXPECT_GT(r.runs.size(), 1u);
  const std::vector<cpu::GemmChoice::Entry> entries = next.entries();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_TRUE(entries[0].stored && entries[1].stored);
  EXPECT_FALSE(entries[2].stored || entries[3].stored);
  for (double g : entries[0].gflops[0]) EXPECT_EQ(g, 0.0) << "a stored plan is not timed";
  cpu::GemmChoice off;  // the file, but the pass off: timed
  off.keep_in(path);
  FakeProduct u{{600, 150, 0, 0}, {}};
  EXPECT_EQ(store(off, 1, u, false, false).lib, GemmLib::OpenBlas);
  EXPECT_GT(u.runs.size(), 1u);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// A product cut into blocks: each kernel on the other split is a candidate too, and the
// fastest plan, kernel and split, is kept and ended on.
TEST(GemmChoice, KeepsTheFastestSplitToo) {
  cpu::GemmChoice choice;
  // the rule's split: fixed rule 600 µs, OpenBLAS 400; the other split: fixed rule 500,
  // OpenBLAS 150
  FakeProduct p{{600, 400, 0, 0}, {}, {500, 150, 0, 0}};
  EXPECT_EQ(measure(choice, 1, p, true), (GemmPlan{GemmLib::OpenBlas, true}));
  EXPECT_EQ(p.plans.back(), (GemmPlan{GemmLib::OpenBlas, true})) << "ends on the kept plan";
  const std::vector<cpu::GemmChoice::Entry> entries = choice.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_GT(entries[0].gflops[1][static_cast<int>(GemmLib::OpenBlas)],
            entries[0].gflops[0][static_cast<int>(GemmLib::OpenBlas)]);
  EXPECT_GT(entries[0].gflops[1][static_cast<int>(GemmLib::Lazytrace)], 0.0);
  // where the other split is no faster, the rule's is kept
  FakeProduct q{{300, 3000, 0, 0}, {}, {3000, 3000, 0, 0}};
  EXPECT_EQ(measure(choice, 2, q, true), (GemmPlan{GemmLib::Lazytrace, false}));
}

// A long product (one round outlasts the timing's budget) whose faster kernel ran slow
// the first time it was timed: its next rounds find it.
TEST(GemmChoice, ALongProductsRunnerUpIsTimedAgain) {
  cpu::GemmChoice choice;
  FakeProduct p{{3000, 300, 0, 0}, {}};                 // the fixed rule 3 ms, OpenBLAS 0.3 ms ...
  p.first[static_cast<int>(GemmLib::OpenBlas)] = 3300;  // ... but 3.3 ms its first time
  EXPECT_EQ(measure(choice, 1, p).lib, GemmLib::OpenBlas);
  EXPECT_EQ(p.runs.back(), GemmLib::OpenBlas);
}

// The rounds go to the kernels that could still win: one far slower than the fastest is
// timed once, one less far at most twice (its best of two), the close ones at least three
// times each, and the faster of the closest pair is kept.
TEST(GemmChoice, AFarSlowerKernelIsTimedOnceAndTheCloseOnesAgain) {
  cpu::GemmChoice choice;
  // the fixed rule 100 µs on the rule's split, 80 on the other; OpenBLAS 600 on the rule's
  // split (7.5x), 160 on the other (2x)
  FakeProduct p{{100, 600, 0, 0}, {}, {80, 160, 0, 0}};
  EXPECT_EQ(measure(choice, 1, p, true), (GemmPlan{GemmLib::Lazytrace, true}));
  auto count = [&](GemmPlan plan) { return std::count(p.plans.begin(), p.plans.end(), plan); };
  EXPECT_EQ(count({GemmLib::OpenBlas, false}), 1) << "a kernel 7.5x slower was timed again";
  EXPECT_LE(count({GemmLib::OpenBlas, true}), 2) << "a kernel 2x slower: its best of two";
  EXPECT_GE(count({GemmLib::Lazytrace, false}), 3);
  EXPECT_GE(count({GemmLib::Lazytrace, true}), 3 + 1);  // and once more, ending on it
}

TEST(GemmChoice, KeepsTheFixedRuleWhereNoKernelIsClearlyFaster) {
  cpu::GemmChoice choice;
  FakeProduct p{{300, 0, 0, 0}, {}};  // every library declines
  EXPECT_EQ(measure(choice, 1, p).lib, GemmLib::Lazytrace);
  FakeProduct q{{300, 3000, 3000, 3000}, {}};  // all slower
  EXPECT_EQ(measure(choice, 2, q).lib, GemmLib::Lazytrace);
  EXPECT_EQ(q.runs.back(), GemmLib::Lazytrace);
}

namespace {

// lt::matmul of the layout's operands, and the float64 product of the same values.
struct LtProduct {
  lt::Tensor c;
  std::vector<double> ref;
};

LtProduct lt_product(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  lt::manual_seed(3);
  lt::Tensor a = ta ? lt::randn({k, m}) : lt::randn({m, k});
  lt::Tensor b = tb ? lt::randn({n, k}) : lt::randn({k, n});
  lt::sync({a, b});
  LtProduct p{lt::matmul(ta ? lt::transpose(a) : a, tb ? lt::transpose(b) : b), {}};
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  p.ref.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q)
        p.ref[static_cast<size_t>(i * n + j)] +=
            static_cast<double>(va[static_cast<size_t>(ta ? q * m + i : i * k + q)]) *
            vb[static_cast<size_t>(tb ? j * k + q : q * n + j)];
  return p;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& ref, int64_t k) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-5 * std::sqrt(static_cast<double>(k)) * 4) << "at " << i;
}

}  // namespace

// Through the API: with the pass on (the default) every layout of a decoder's products is
// right, the first run (which measures) gives the bits of every later one, and the product
// is listed in kernel_choices; with it off nothing is measured.
TEST(GemmChoice, MatmulIsRightAndStableWithTheChoiceOnAndOff) {
  const int64_t shapes[][3] = {{16, 256, 128}, {64, 128, 256}, {256, 64, 16}};
  for (const auto& s : shapes)
    for (int layout = 0; layout < 3; ++layout) {
      const bool ta = layout == 2, tb = layout == 1;
      LtProduct first = lt_product(s[0], s[1], s[2], ta, tb);
      const std::vector<float> bits = first.c.to_vector<float>();
      expect_near(bits, first.ref, s[2]);
      for (int run = 0; run < 3; ++run)
        EXPECT_EQ(lt_product(s[0], s[1], s[2], ta, tb).c.to_vector<float>(), bits)
            << "the kept kernel must give the first run's bits";
    }
  const std::string choices = lt::debug::kernel_choices();
  EXPECT_NE(choices.find("matmul 16 x 128 @ 128 x 256 (NN"), std::string::npos) << choices;
  EXPECT_NE(choices.find("matmul 16 x 128 @ 128 x 256 (NT"), std::string::npos) << choices;
  EXPECT_NE(choices.find("matmul 256 x 16 @ 16 x 64 (TN"), std::string::npos) << choices;

  lt::debug::set_disabled_passes({"gemm_choice"});
  LtProduct off = lt_product(48, 80, 96, false, true);
  expect_near(off.c.to_vector<float>(), off.ref, 96);
  EXPECT_EQ(lt::debug::kernel_choices(), choices) << "measured with the pass off";
  lt::debug::set_disabled_passes({});
}

// A product too small for the rule to cut (the rule runs it whole on one thread): with
// gemm_cut_small on, GemmChoice times it cut into blocks over the threads too ("other
// split" in kernel_choices), and whichever it keeps is right and gives the first run's bits
// at every run; with the pass off, only whole.
TEST(GemmChoice, ASmallProductIsTimedCutOverTheThreadsToo) {
  if (lt::runtime::num_threads() < 2) GTEST_SKIP() << "one thread: nothing to cut over";
  lt::debug::set_disabled_passes({});
  // (one line per measured product; the shape's lines in the order they were measured)
  auto lines_of = [](const std::string& shape) {
    std::vector<std::string> found;
    const std::string all = lt::debug::kernel_choices();
    for (size_t at = all.find(shape); at != std::string::npos; at = all.find(shape, at + 1))
      found.push_back(all.substr(at, all.find('\n', at) - at));
    return found;
  };
  // 16 x 96 @ 96 x 112: 172032 multiply-adds, between GemmChoice's least and the rule's cut
  for (const bool cut_on : {true, false}) {
    SCOPED_TRACE(cut_on ? "gemm_cut_small on" : "gemm_cut_small off");
    if (!cut_on) lt::debug::set_disabled_passes({"gemm_cut_small"});
    for (int layout = 0; layout < 2; ++layout) {
      const bool tb = layout == 1;
      LtProduct first = lt_product(16, 112, 96, false, tb);
      const std::vector<float> bits = first.c.to_vector<float>();
      expect_near(bits, first.ref, 96);
      for (int run = 0; run < 3; ++run)
        EXPECT_EQ(lt_product(16, 112, 96, false, tb).c.to_vector<float>(), bits)
            << "the kept plan must give the first run's bits";
      const std::vector<std::string> lines =
          lines_of(std::string("matmul 16 x 96 @ 96 x 112 (") + (tb ? "NT" : "NN"));
      ASSERT_EQ(lines.size(), cut_on ? 1u : 2u);
      EXPECT_EQ(lines.back().find("other split:") != std::string::npos, cut_on) << lines.back();
    }
  }
  lt::debug::set_disabled_passes({});
}

namespace {

// Whether this CPU has the bfloat16 dot products (AVX512_BF16) and the build oneDNN.
bool native_bf16() {
  return cpu::gemm_lib_available(GemmLib::OneDnn) && __builtin_cpu_supports("avx512bf16");
}

// A product of bfloat16 values, summed in float32 and rounded once: within half a bfloat16
// step of the float64 product plus float32's summation error.
void expect_bf16_near(double got, double ref, double mag, int64_t k, const std::string& what) {
  const double tol = std::abs(ref) * std::ldexp(1.0, -8) + mag * k * 1e-7 + 1e-30;
  ASSERT_LE(std::abs(got - ref), tol) << what << ": got " << got << ", want " << ref;
}

}  // namespace

// The bfloat16 product on the CPU's bfloat16 instructions, at every layout with padded
// leading dimensions: right where it runs, and C untouched where it declines (a CPU without
// them), which it must do exactly there.
TEST(GemmLibs, Bfloat16ProductsMatchAFloat64Loop) {
  const int64_t shapes[][3] = {
      {1, 1, 1}, {5, 300, 40}, {17, 33, 65}, {16, 1024, 128}, {64, 96, 16}};
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout) {
      const int64_t m = s[0], n = s[1], k = s[2];
      const bool ta = layout & 1, tb = layout & 2;
      const int64_t pad = 3;
      const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      auto bf16s = [](size_t count, uint32_t seed) {
        std::vector<lt::BFloat16> v;
        for (float x : randoms(count, seed)) v.emplace_back(x);
        return v;
      };
      const std::vector<lt::BFloat16> a = bf16s(static_cast<size_t>((ta ? k : m) * lda), 1);
      const std::vector<lt::BFloat16> b = bf16s(static_cast<size_t>((tb ? n : k) * ldb), 2);
      std::vector<lt::BFloat16> c(static_cast<size_t>(m * ldc), lt::BFloat16(7.0f));
      const cpu::GemmOperand oa{ta, lda, ta ? 1 : lda, ta ? lda : 1};
      const cpu::GemmOperand ob{tb, ldb, tb ? 1 : ldb, tb ? ldb : 1};
      const bool ran = cpu::run_gemm_bf16(m, n, k, a.data(), oa, b.data(), ob, c.data(), ldc);
      ASSERT_EQ(ran, native_bf16());
      const std::string what = std::to_string(m) + "x" + std::to_string(k) + "@" +
                               std::to_string(k) + "x" + std::to_string(n) + (ta ? " Aᵀ" : "") +
                               (tb ? " Bᵀ" : "");
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const float got = c[static_cast<size_t>(i * ldc + j)];
          if (!ran || j >= n) {
            ASSERT_EQ(got, 7.0f) << what << ": wrote C at " << i << ", " << j;
            continue;
          }
          const auto [ref, mag] = reference(a, ta, lda, b, tb, ldb, i, j, k);
          expect_bf16_near(got, ref, mag, k, what);
        }
    }
  if (!native_bf16()) GTEST_SKIP() << "no AVX512_BF16 (or no oneDNN): declining checked";
}

// lt::matmul in bfloat16, batched (one product of all rows) and transposed, with the choice on
// (which times the widening to float32 against the bfloat16 instructions) and off (the widening):
// both right, and the choice lists the product as bf16.
TEST(GemmChoice, Bfloat16MatmulIsRightWithTheChoiceOnAndOff) {
  for (const bool choice : {true, false}) {
    if (!choice) lt::debug::set_disabled_passes({"gemm_choice"});
    lt::manual_seed(5);
    const int64_t batch = 3, m = 40, k = 96, n = 64;
    lt::Tensor a = lt::astype(lt::randn({batch, m, k}), lt::bfloat16);
    lt::Tensor b = lt::astype(lt::randn({n, k}), lt::bfloat16);
    lt::Tensor c = lt::matmul(a, lt::transpose(b));
    ASSERT_EQ(c.dtype(), lt::bfloat16);
    const std::vector<float> va = lt::astype(a, lt::float32).to_vector<float>();
    const std::vector<float> vb = lt::astype(b, lt::float32).to_vector<float>();
    const std::vector<float> vc = lt::astype(c, lt::float32).to_vector<float>();
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const auto [ref, mag] = reference(va, false, k, vb, true, k, bi * m + i, j, k);
          expect_bf16_near(vc[static_cast<size_t>((bi * m + i) * n + j)], ref, mag, k,
                           choice ? "choice on" : "choice off");
        }
    lt::debug::set_disabled_passes({});
  }
  const std::string choices = lt::debug::kernel_choices();
  EXPECT_NE(choices.find("120 x 96 @ 96 x 64 (NT, "), std::string::npos) << choices;
  EXPECT_NE(choices.find("bf16)"), std::string::npos) << choices;
}

// The small bfloat16 kernel (AVX-512 with BW and VL): a few rows against a float64 loop, for
// B = Wᵀ (dot products over rows of memory) and B row-major (rows of B read 64 columns at a
// time), sizes around its blocks (4 dots, 16 of the reduction, 64 columns) up to the rows it
// takes at most; C's padding untouched; layouts and sizes it does not take declined untouched.
TEST(GemmLibs, SmallBfloat16KernelMatchesAFloat64Loop) {
  if (!cpu::has_avx512_bw_vl()) GTEST_SKIP() << "no AVX-512 BW/VL";
  const int64_t shapes[][3] = {{1, 1, 2},   {1, 2048, 512}, {3, 5, 17},  {4, 64, 16},
                               {4, 65, 33}, {2, 130, 128},  {4, 7, 300}, {2, 1, 40},
                               {1, 1, 16},  {3, 17, 40},    {4, 33, 9},  {4, 48, 70}};
  for (const auto& s : shapes)
    for (int layout = 0; layout < 2; ++layout) {
      const int64_t m = s[0], n = s[1], k = s[2], pad = 3;
      const bool wt = layout == 0;  // B = Wᵀ, W [n, k] row-major; else B [k, n] row-major
      if (!wt && n < 16) continue;  // rows narrower than a vector: declined (below)
      const int64_t lda = k + pad, ldb = (wt ? k : n) + pad, ldc = n + pad;
      auto bf16s = [](size_t count, uint32_t seed) {
        std::vector<lt::BFloat16> v;
        for (float x : randoms(count, seed)) v.emplace_back(x);
        return v;
      };
      const std::vector<lt::BFloat16> a = bf16s(static_cast<size_t>(m * lda), 3);
      const std::vector<lt::BFloat16> b = bf16s(static_cast<size_t>((wt ? n : k) * ldb), 4);
      std::vector<lt::BFloat16> c(static_cast<size_t>(m * ldc), lt::BFloat16(7.0f));
      const bool ran = cpu::small_gemm_bf16_avx512(m, n, k, a.data(), lda, 1, b.data(),
                                                   wt ? 1 : ldb, wt ? ldb : 1, c.data(), ldc);
      const std::string what = std::to_string(m) + "x" + std::to_string(k) + "@" +
                               std::to_string(k) + "x" + std::to_string(n) + (wt ? " Wᵀ" : "");
      ASSERT_TRUE(ran) << what;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const float got = c[static_cast<size_t>(i * ldc + j)];
          if (j >= n) {
            ASSERT_EQ(got, 7.0f) << what << ": wrote C's padding";
            continue;
          }
          const auto [ref, mag] = reference(a, false, lda, b, wt, ldb, i, j, k);
          expect_bf16_near(got, ref, mag, k, what);
        }
    }
  // A transposed as well as B = Wᵀ with W's columns runs: neither layout, declined
  std::vector<lt::BFloat16> x(64, lt::BFloat16(1.0f)), out(4, lt::BFloat16(7.0f));
  EXPECT_FALSE(cpu::small_gemm_bf16_avx512(2, 2, 8, x.data(), 1, 8, x.data(), 2, 8, out.data(), 2));
  EXPECT_EQ(static_cast<float>(out[0]), 7.0f);
  EXPECT_FALSE(cpu::small_gemm_bf16_avx512(2, 2, 8, x.data(), 8, 1, x.data(), 2, 1, out.data(), 2))
      << "B's rows narrower than a vector";
  EXPECT_FALSE(cpu::small_gemm_bf16_avx512(cpu::kSmallGemmBf16Rows + 1, 2, 8, x.data(), 8, 1,
                                           x.data(), 2, 1, out.data(), 2))
      << "more rows than it takes";
}

// The fixed rule's rounding of float32 sums to bfloat16 (8 rows: the widening, not the small
// kernel): ties to even, infinities, NaN, as BFloat16 rounds one value.
TEST(GemmChoice, Bfloat16ProductsRoundTiesToEvenAndKeepNaN) {
  lt::debug::set_disabled_passes({"gemm_choice"});
  const float inf = std::numeric_limits<float>::infinity();
  // row i of A times B = [1, 1]ᵀ: a sum of two bfloat16 values
  const std::vector<float> pairs = {1.0f,       0x1p-8f,  // 1 + 2^-8: a tie, to 1
                                    1.0078125f, 0x1p-8f,  // (1 + 2^-7) + 2^-8: to 1 + 2^-6
                                    3.0f,       4.0f,     // exact
                                    inf,        1.0f,    -inf, -1.0f,  // infinities
                                    NAN,        1.0f,    inf,  -inf,   // NaN, and inf - inf
                                    0x1p127f,   0x1p127f};             // overflow to inf
  lt::Tensor a = lt::astype(lt::tensor(pairs, {8, 2}), lt::bfloat16);
  lt::Tensor b = lt::astype(lt::ones({2, 1}), lt::bfloat16);
  const std::vector<float> got = lt::astype(lt::matmul(a, b), lt::float32).to_vector<float>();
  lt::debug::set_disabled_passes({});
  const std::vector<float> want = {1.0f, 1.015625f, 7.0f, inf, -inf};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "row " << i;
  EXPECT_TRUE(std::isnan(got[5]));
  EXPECT_TRUE(std::isnan(got[6]));
  EXPECT_EQ(got[7], inf);
}
