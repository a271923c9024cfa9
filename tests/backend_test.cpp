// The CPU backend's instruction-set copies: the AVX2 and AVX-512 float32 loops compute the
// same bits as the baseline loops, for every elementwise op, special values and the AdamW
// update; the small products (AVX2 + FMA, AVX-512) match a float64 loop for every layout,
// size and tail they take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/optim_loops.h"
#include "backends/cpu/reduce_row.h"
#include "backends/cpu/small_gemm.h"
#include "backends/cpu/timed_choice.h"
#include "isa.h"
#include "lazytrace/metrics/metrics.h"
#include "runtime/buffer.h"

namespace {

using lazytrace::ir::OpKind;

namespace cpu = lazytrace::cpu;

std::vector<float> inputs(uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {
      0.0f,    -0.0f, 1.0f,   -1.0f,  0.5f,   -0.625f,
      0.625f,  88.7f, 88.8f,  -87.3f, -87.4f, 1e-40f,
      -1e-40f, 1e30f, -1e30f, inf,    -inf,   std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  while (v.size() < 1031) v.push_back(d(g));  // not a multiple of 8: the loops' tails too
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;  // a NaN's sign means nothing
    EXPECT_EQ(0, std::memcmp(&got[i], &want[i], sizeof(float)))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// One instruction set's float32 loops (elementwise.h, optim_loops.h, reduce_row.h)
struct Loops {
  decltype(&cpu::unary_f32_avx2) unary;
  decltype(&cpu::binary_f32_avx2) binary;
  decltype(&cpu::binary_scalar_f32_avx2) binary_scalar;
  decltype(&cpu::adamw_range_f32_avx2) adamw_range;
  decltype(&cpu::adamw_in_place_f32_avx2) adamw_in_place;
  decltype(&cpu::sum_row_f32_avx2) sum_row;
  decltype(&cpu::max_row_f32_avx2) max_row;
};
const Loops avx2{cpu::unary_f32_avx2,          cpu::binary_f32_avx2,
                 cpu::binary_scalar_f32_avx2,  cpu::adamw_range_f32_avx2,
                 cpu::adamw_in_place_f32_avx2, cpu::sum_row_f32_avx2,
                 cpu::max_row_f32_avx2};
const Loops avx512{cpu::unary_f32_avx512,          cpu::binary_f32_avx512,
                   cpu::binary_scalar_f32_avx512,  cpu::adamw_range_f32_avx512,
                   cpu::adamw_in_place_f32_avx512, cpu::sum_row_f32_avx512,
                   cpu::max_row_f32_avx512};

void expect_elementwise_baseline_bits(const Loops& loops) {
  const std::vector<float> a = inputs(1), b = inputs(2);
  const size_t n = a.size();
  std::vector<float> got(n), want(n);
  for (OpKind op : {OpKind::Neg, OpKind::Exp, OpKind::Log, OpKind::Sin, OpKind::Cos, OpKind::Tanh,
                    OpKind::Sigmoid, OpKind::Relu, OpKind::Gelu, OpKind::Silu, OpKind::Sqrt,
                    OpKind::Rsqrt, OpKind::Abs, OpKind::Erf}) {
    loops.unary(op, got.data(), a.data(), n);
    cpu::elementwise::unary<float>(op, want.data(), a.data(), n);
    expect_same_bits(got, want, lazytrace::ir::op_name(op));
  }
  for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow,
                    OpKind::Maximum, OpKind::Minimum}) {
    loops.binary(op, got.data(), a.data(), b.data(), n);
    cpu::elementwise::binary<float>(op, want.data(), a.data(), b.data(), n);
    expect_same_bits(got, want, lazytrace::ir::op_name(op));
    for (bool a_one : {true, false}) {  // one operand a single value
      loops.binary_scalar(op, got.data(), a.data() + 2, a_one, b.data(), !a_one, n);
      cpu::elementwise::binary_scalar<float>(op, want.data(), a.data() + 2, a_one, b.data(), !a_one,
                                             n);
      expect_same_bits(got, want, lazytrace::ir::op_name(op));
    }
  }
}

// Row sums and maxima of every length up to 70 (the 16 partials' tails) and of the whole
// input, against the baseline's bits and a plain loop: a float64 sum in order (the partials
// only reorder float64 additions of floats, far below a float's ulp apart) and the maximum;
// with the special values too, a NaN among them makes the maximum NaN.
void expect_row_reductions_baseline_bits(const Loops& loops) {
  const std::vector<float> a = inputs(7);
  const float* x = a.data() + 18;  // past the special values: finite
  std::vector<int64_t> lengths(71);
  for (int64_t n = 0; n <= 70; ++n) lengths[static_cast<size_t>(n)] = n;
  lengths.push_back(static_cast<int64_t>(a.size()) - 18);
  for (int64_t n : lengths) {
    const double got = loops.sum_row(x, n), want = cpu::sum_row_f32_inline(x, n);
    EXPECT_EQ(0, std::memcmp(&got, &want, sizeof got))
        << "sum_row of " << n << ": " << got << " vs " << want;
    double plain = 0;
    float largest = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      plain += x[j];
      largest = std::max(largest, x[j]);
    }
    EXPECT_NEAR(got, plain, 1e-12 * (1 + std::fabs(plain))) << "sum_row of " << n;
    EXPECT_EQ(loops.max_row(x, n), largest) << "max_row of " << n;
    EXPECT_EQ(cpu::max_row_f32_inline(x, n), largest) << "max_row of " << n;
  }
  const auto all = static_cast<int64_t>(a.size());
  EXPECT_TRUE(std::isnan(loops.max_row(a.data(), all)));
  EXPECT_TRUE(std::isnan(cpu::max_row_f32_inline(a.data(), all)));
  EXPECT_EQ(loops.max_row(a.data(), 17), std::numeric_limits<float>::infinity());  // no NaN
  for (int64_t n = 1; n <= 18; ++n) {  // short rows (4 partials, then a scalar tail) too
    bool nan = false;
    float largest = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      nan = nan || std::isnan(a[static_cast<size_t>(j)]);
      largest = std::max(largest, a[static_cast<size_t>(j)]);
    }
    for (const float got : {loops.max_row(a.data(), n), cpu::max_row_f32_inline(a.data(), n)}) {
      if (nan)
        EXPECT_TRUE(std::isnan(got)) << "max_row of the first " << n << " special values";
      else
        EXPECT_EQ(got, largest) << "max_row of the first " << n << " special values";
    }
  }
}

void expect_adamw_baseline_bits(const Loops& loops) {
  std::vector<float> p = inputs(3), g = inputs(4), m = inputs(5), v = inputs(6);
  for (float& x : v) x = std::fabs(x);  // a second moment is never negative
  const size_t n = p.size();
  const cpu::AdamWNumbers<float> k{0.999f, 1e-3f, 3.16f, 0.9f, 0.1f, 0.999f, 0.001f, 1e-8f};
  std::vector<float> po(n), mo(n), vo(n), pw(n), mw(n), vw(n);
  loops.adamw_range(p.data(), g.data(), m.data(), v.data(), po.data(), mo.data(), vo.data(), k,
                    static_cast<int64_t>(n));
  cpu::adamw_range<float>(p.data(), g.data(), m.data(), v.data(), pw.data(), mw.data(), vw.data(),
                          k, static_cast<int64_t>(n));
  expect_same_bits(po, pw, "adamw param");
  expect_same_bits(mo, mw, "adamw exp_avg");
  expect_same_bits(vo, vw, "adamw exp_avg_sq");
  loops.adamw_in_place(p.data(), g.data(), m.data(), v.data(), k, static_cast<int64_t>(n));
  expect_same_bits(p, pw, "adamw in place: param");
  expect_same_bits(m, mw, "adamw in place: exp_avg");
  expect_same_bits(v, vw, "adamw in place: exp_avg_sq");
}

// A timed trial runs a step both ways in turn (way 1 first), leaves each way's first run out
// (cold caches), keeps the way of the faster best run once each way has kTimed more, and then
// gives that way untimed; a TimedChoice gives each key its own trial, and each decision is
// counted once.
TEST(CpuKernels, ATimedTrialKeepsTheWayOfTheFasterBestRun) {
  using lazytrace::cpu::TimedChoice;
  using lazytrace::cpu::TimedTrial;
  TimedChoice choice("TimedChoiceTest", "zero", "one");
  const std::shared_ptr<TimedTrial> a = choice.trial({1, 2, 3, 4}), b = choice.trial({5, 6, 7, 8});
  EXPECT_EQ(choice.trial({1, 2, 3, 4}), a);
  const int64_t zero0 = lazytrace::metrics::counter("TimedChoiceTest[zero]"),
                one0 = lazytrace::metrics::counter("TimedChoiceTest[one]");
  // a: way 0 is faster at its best (40 against 50), though its first run (a cold 1000) and
  // its mean are worse; b: way 1 is faster everywhere
  const int64_t times_a[2][4] = {{1000, 90, 40, 95}, {60, 55, 50, 52}};
  const int64_t times_b[2][4] = {{30, 31, 32, 33}, {10, 11, 12, 13}};
  int runs[2][2] = {};  // [trial][way]
  for (int r = 0; r < 2 * (TimedTrial::kTimed + 1); ++r)
    for (int k = 0; k < 2; ++k) {
      bool timed = false;
      TimedTrial& t = k == 0 ? *a : *b;
      const bool way = t.way(timed);
      ASSERT_TRUE(timed) << "run " << r;
      EXPECT_EQ(way, r % 2 == 0) << "run " << r << ": the ways go in turn, way 1 first";
      const int w = way ? 1 : 0;
      t.record(way, (k == 0 ? times_a : times_b)[w][runs[k][w]++]);
    }
  EXPECT_EQ(lazytrace::metrics::counter("TimedChoiceTest[zero]") - zero0, 1);
  EXPECT_EQ(lazytrace::metrics::counter("TimedChoiceTest[one]") - one0, 1);
  for (int r = 0; r < 3; ++r) {
    bool timed = true;
    EXPECT_FALSE(a->way(timed));
    EXPECT_FALSE(timed);
    EXPECT_TRUE(b->way(timed));
    EXPECT_FALSE(timed);
    a->record(true, 1);  // a late record changes nothing
  }
  bool timed = true;
  EXPECT_FALSE(a->way(timed));
  // a run through a decided trial, or none, is not timed and goes the way given
  lazytrace::cpu::TimedRun decided(b, false), none(nullptr, true);
  EXPECT_TRUE(decided.way());
  EXPECT_TRUE(none.way());
  decided.done();
  none.done();
}

TEST(CpuKernels, Avx2LoopsComputeTheBaselineBits) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx2_fma(), "avx2",
                      "this CPU (or LAZYTRACE_NO_AVX2) runs the baseline only");
  expect_elementwise_baseline_bits(avx2);
  expect_row_reductions_baseline_bits(avx2);
}

TEST(CpuKernels, Avx2AdamWLoopsComputeTheBaselineBits) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx2(), "avx2",
                      "this CPU (or LAZYTRACE_NO_AVX2) runs the baseline only");
  expect_adamw_baseline_bits(avx2);
}

TEST(CpuKernels, Avx512LoopsComputeTheBaselineBits) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx512(), "avx512",
                      "this CPU (or LAZYTRACE_NO_AVX512) has no AVX-512");
  expect_elementwise_baseline_bits(avx512);
  expect_row_reductions_baseline_bits(avx512);
}

TEST(CpuKernels, Avx512AdamWLoopsComputeTheBaselineBits) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx512(), "avx512",
                      "this CPU (or LAZYTRACE_NO_AVX512) has no AVX-512");
  expect_adamw_baseline_bits(avx512);
}

// One product through small_gemm_f32: A [m, k] and B [k, n] in the given strides, C with
// row stride ldc at `c_off` floats past a 64-byte boundary. Checks C against a float64 loop
// and that nothing outside C's m x n window was written.
struct Layout {
  int64_t ars, acs, brs, bcs;
};

// through the AVX2 or the AVX-512 kernels
void check_small_gemm(const cpu::SmallGemmKernels& kernels, int64_t m, int64_t n, int64_t k,
                      const Layout& l, int64_t ldc, int64_t c_off, bool expect_taken) {
  std::mt19937 g(static_cast<uint32_t>(m * 131 + n * 17 + k));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>((m - 1) * l.ars + (k - 1) * l.acs + 1));
  std::vector<float> b(static_cast<size_t>((k - 1) * l.brs + (n - 1) * l.bcs + 1));
  for (float& x : a) x = d(g);
  for (float& x : b) x = d(g);
  const float sentinel = -12345.0f;
  std::vector<float> buf(static_cast<size_t>(16 + c_off + m * ldc), sentinel);
  float* base = buf.data();  // the first 64-byte boundary in buf
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  float* C = base + c_off;
  const bool taken =
      cpu::small_gemm_f32(kernels, m, n, k, a.data(), l.ars, l.acs, b.data(), l.brs, l.bcs, C, ldc);
  ASSERT_EQ(taken, expect_taken) << m << "x" << n << "x" << k;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = C[i * ldc + j];
      if (j >= n || !taken) {
        ASSERT_EQ(got, sentinel) << "wrote outside C at " << i << "," << j;
        continue;
      }
      double want = 0, scale = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = a[i * l.ars + p * l.acs], y = b[p * l.brs + j * l.bcs];
        want += x * y;
        scale += std::fabs(x * y);
      }
      ASSERT_NEAR(got, want, 1e-6 * (scale + 1))
          << m << "x" << n << "x" << k << " at " << i << "," << j;
    }
  for (int64_t j = 0; j < c_off; ++j) ASSERT_EQ(base[j], sentinel);
  // the same product, asked to prefetch three streams beside it: the same bits, and the
  // short-reduction kernels walk the streams (never past their end)
  const std::vector<float> first(C, C + m * ldc);
  std::vector<float> streams(3 * 4096);
  cpu::ReadAhead ahead{{streams.data(), streams.data() + 4096, streams.data() + 8192}, 4096 * 4};
  cpu::small_gemm_f32(kernels, m, n, k, a.data(), l.ars, l.acs, b.data(), l.brs, l.bcs, C, ldc,
                      &ahead);
  for (int64_t i = 0; i < m * ldc; ++i)
    ASSERT_EQ(0, std::memcmp(&C[i], &first[static_cast<size_t>(i)], sizeof(float))) << i;
  if (taken && k <= 32 && l.bcs == 1 && n >= 16) {  // (narrower: scalar loops in AVX2)
    EXPECT_GT(ahead.done, 0);
  }
  EXPECT_LE(ahead.done, ahead.bytes);
  // ... or to read ranges (a loop's next slices, thread_read_ahead): the same bits again,
  // and the long-reduction kernel walks from range to range
  std::vector<float> r0(1024), r1(300);
  const cpu::ReadAhead::Range ranges[] = {{r0.data(), 4096}, {r1.data(), 1200}};
  cpu::ReadAhead more{.next = ranges, .end = ranges + 2};
  cpu::small_gemm_f32(kernels, m, n, k, a.data(), l.ars, l.acs, b.data(), l.brs, l.bcs, C, ldc,
                      &more);
  for (int64_t i = 0; i < m * ldc; ++i)
    ASSERT_EQ(0, std::memcmp(&C[i], &first[static_cast<size_t>(i)], sizeof(float))) << i;
  const bool dot = m <= 32 && k >= 8 && l.acs == 1 && l.brs == 1;
  if (taken && !dot && k > 32 && n >= 16) {  // the long reduction: a line per step, at least
    // k * (n / 16) steps; the first range is 64 lines
    EXPECT_GE(more.next, ranges + (k * (n / 16) > 64 ? 2 : 1)) << m << "x" << n << "x" << k;
  }
  EXPECT_LT(more.done, more.bytes + 64);  // the line holding a range's last byte, no further
  // ... or with B in a loop's shadow (its next iteration's copy `delta` bytes after it, or
  // before: a reversed loop): the same bits
  std::vector<float> twin(3 * b.size());
  std::copy(b.begin(), b.end(), twin.begin() + static_cast<std::ptrdiff_t>(b.size()));
  const float* mid = twin.data() + b.size();
  const auto bytes = static_cast<int64_t>(b.size() * sizeof(float));
  for (const int64_t delta : {bytes, -bytes}) {
    const cpu::Shadow shadow{reinterpret_cast<const char*>(mid),
                             reinterpret_cast<const char*>(mid) + bytes, delta};
    cpu::small_gemm_f32(kernels, m, n, k, a.data(), l.ars, l.acs, mid, l.brs, l.bcs, C, ldc,
                        nullptr, cpu::Shadows{&shadow, &shadow + 1});
    for (int64_t i = 0; i < m * ldc; ++i)
      ASSERT_EQ(0, std::memcmp(&C[i], &first[static_cast<size_t>(i)], sizeof(float)))
          << "delta " << delta << " at " << i;
  }
}

// Every layout and tail of the small products, through one kernel set.
void check_small_gemms(const cpu::SmallGemmKernels& kernels) {
  auto check = [&](int64_t m, int64_t n, int64_t k, const Layout& l, int64_t ldc, int64_t c_off,
                   bool taken) { check_small_gemm(kernels, m, n, k, l, ldc, c_off, taken); };
  // few rows, both operands contiguous along k (x Wᵀ): AVX2 tiles of 3 x 4 with k in steps
  // of 8; AVX-512 groups of 16 rows and tiles of 16 columns
  for (int64_t m : {1, 2, 3, 4, 7, 16, 17, 32})
    for (int64_t n : {1, 2, 3, 4, 5, 9, 16, 17, 33, 64})
      for (int64_t k : {8, 9, 31, 128}) {
        const int64_t lda = k + 3, ldb = k + 5;  // rows padded: strides, not widths
        check(m, n, k, {lda, 1, 1, ldb}, n + 2, 1, true);
      }
  // a short reduction, B contiguous along n: A as rows (dY W) or transposed (Xᵀ dY)
  for (int64_t m : {1, 5, 6, 7, 13, 40})
    for (int64_t n : {1, 7, 8, 9, 16, 17, 40, 64, 100})
      for (int64_t k : {1, 2, 16, 32}) {
        check(m, n, k, {k + 1, 1, n + 3, 1}, n, 0, true);
        check(m, n, k, {1, m + 2, n, 1}, n + 1, 3, true);
      }
  // weight-gradient sizes: C written with streaming stores when aligned, plainly when not
  check(128, 1024, 16, {1, 128, 1024, 1}, 1024, 0, true);
  check(1024, 128, 16, {1, 1024, 128, 1}, 128, 0, true);
  check(1024, 128, 16, {1, 1024, 128, 1}, 128, 1, true);
  check(300, 333, 3, {3, 1, 333, 1}, 333, 0, true);
  // few rows, A along k and B along n, a long reduction (dY W): B in blocks of rows
  for (int64_t m : {1, 5, 6, 7, 16, 17, 32})
    for (int64_t n : {1, 7, 8, 9, 16, 17, 40})
      for (int64_t k : {33, 64, 65, 130, 600}) check(m, n, k, {k + 1, 1, n + 3, 1}, n + 2, 1, true);
  check(16, 64, 1024, {1024, 1, 128, 1}, 128, 0, true);  // a column half of dY W
  check(16, 128, 1024, {1024, 1, 128, 1}, 128, 0, true);
  check(16, 512, 128, {128, 1, 1024, 1}, 1024, 0, true);
  // anything else is BLAS's, and C is left alone
  check(33, 16, 33, {33, 1, 1, 33}, 16, 0, false);  // rows and reduction > 32
  check(8, 16, 7, {7, 1, 1, 7}, 16, 0, false);      // k < 8 with B transposed
  check(33, 16, 64, {64, 1, 16, 1}, 16, 0, false);  // B along n, rows > 32
  check(8, 16, 64, {1, 8, 16, 1}, 16, 0, false);    // A along m, long reduction
}

TEST(CpuKernels, SmallProductsMatchAFloat64Loop) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx2_fma(), "avx2",
                      "this CPU (or LAZYTRACE_NO_AVX2) has BLAS do every product");
  check_small_gemms(*cpu::small_gemm_avx2());
}

TEST(CpuKernels, SmallProductsInAvx512MatchAFloat64Loop) {
  LT_SKIP_WITHOUT_ISA(cpu::has_avx512(), "avx512",
                      "this CPU (or LAZYTRACE_NO_AVX512) has the AVX2 kernels do these products");
  check_small_gemms(*cpu::small_gemm_avx512());
}

// The fused kernel reads a contiguous float32 input in place. A step that writes one output
// into that input's own buffer (a donated input) and stores another unchanged from it must
// store the input's values, in either order of the stores, on every tile.
TEST(CpuKernels, FusedStepStoresAnInputReadInPlaceBeforeOverwritingIt) {
  const int64_t n = 5000;  // several tiles
  for (bool overwrite_first : {true, false}) {
    std::vector<float> x(n), copy(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
    const std::vector<float> want = x;
    cpu::View vx{.storage = 0, .shape = lazytrace::Shape({n}), .strides = {1}};
    cpu::View vcopy = vx, two;
    vcopy.storage = 1;
    two.value = 2.0;  // a scalar: storage -1
    cpu::FusedStep st;
    st.shape = lazytrace::Shape({n});
    st.loads = {vx, two};
    using lazytrace::DType;
    st.program = {{.op = OpKind::Data,
                   .dtype = DType::float32,
                   .in_dtype = DType::float32,
                   .dst = 0,
                   .load = 0},
                  {.op = OpKind::Data,
                   .dtype = DType::float32,
                   .in_dtype = DType::float32,
                   .dst = 1,
                   .load = 1},
                  {.op = OpKind::Mul,
                   .dtype = DType::float32,
                   .in_dtype = DType::float32,
                   .dst = 1,
                   .src = {0, 1, -1}}};
    st.num_regs = 2;
    const cpu::FusedStep::Store to_x{1, vx}, to_copy{0, vcopy};
    st.stores = overwrite_first ? std::vector{to_x, to_copy} : std::vector{to_copy, to_x};
    cpu::RunContext ctx;
    ctx.base = {reinterpret_cast<char*>(x.data()), reinterpret_cast<char*>(copy.data())};
    const std::vector<lazytrace::runtime::ScalarArg> scalars;
    ctx.scalars = &scalars;
    cpu::run_fused(st, ctx);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      ASSERT_EQ(copy[k], want[k]) << overwrite_first << " " << i;
      ASSERT_EQ(x[k], 2.0f * want[k]) << overwrite_first << " " << i;
    }
  }
}

// Buffers from 4 MiB (stacked weights and their moments) start on a 2 MiB boundary, where
// transparent huge pages can back them; smaller ones on a cache line.
TEST(Backend, LargeBuffersAreAlignedForHugePages) {
  namespace rt = lazytrace::runtime;
  for (size_t bytes : {size_t{4} << 20, (size_t{5} << 20) + 3, size_t{51} << 20}) {
    rt::BufferPtr b = rt::make_buffer(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (size_t{2} << 20), 0u) << bytes;
    std::memset(b->data(), 1, bytes);  // every byte asked for is there
  }
  for (size_t bytes : {size_t{100}, size_t{5000}, (size_t{4} << 20) - 1}) {
    rt::BufferPtr b = rt::make_buffer(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u) << bytes;
    std::memset(b->data(), 1, bytes);
  }
}

}  // namespace
