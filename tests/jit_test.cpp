// Fused steps as native code (backends/cpu/jit_elementwise.h, the pass jit_fused): every op
// it takes gives the interpreter's bits over every kind of float, at every length of tail;
// steps it does not take are interpreted; the pass switches.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/jit_elementwise.h"
#include "backends/cpu/math.h"
#include "backends/cpu/value_ranges.h"
#include "isa.h"
#include "passes_off.h"

namespace {

using lt::Tensor;

using lt_test::PassesOff;

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Special values, the thresholds of math.h's formulas and their neighbours, then a sweep
// through every exponent and sign (a stride through the 2^32 bit patterns).
std::vector<float> all_kinds(int64_t sweep) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,       -0.0f,    inf,       -inf,       NAN,     -NAN,
                          1e-45f,     -1e-45f,  1.17e-38f, -1.17e-38f, 3.4e38f, -3.4e38f,
                          0.625f,     -0.625f,  10.0f,     -10.0f,     20.0f,   88.72283f,
                          -87.33654f, 88.7229f, -87.3366f, 89.0f,      -104.0f, 0.5f,
                          1.0f,       -1.0f,    2.0f,      1e-8f};
  for (size_t i = 0, n = v.size(); i < n; ++i) {
    v.push_back(std::nextafter(v[i], inf));
    v.push_back(std::nextafter(v[i], -inf));
  }
  for (int64_t i = 0; i < sweep; ++i) {
    const uint32_t b = static_cast<uint32_t>(i) * 2654435761u;
    float f;
    std::memcpy(&f, &b, sizeof f);
    v.push_back(f);
  }
  return v;
}

// The same bits, where a NaN matches any NaN (which NaN an operation of two NaNs returns is
// the order of its operands, not the value).
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<float>& in, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (bits(got[i]) != bits(want[i]) && shown++ < 5)
      ADD_FAILURE() << what << " of " << in[i] << " (bits " << std::hex << bits(in[i])
                    << "): native " << got[i] << " (" << bits(got[i]) << "), interpreted "
                    << want[i] << " (" << bits(want[i]) << ")";
  }
}

// t's values as floats (a bfloat16 tensor computed first, then widened in a graph of its own)
std::vector<float> floats(const Tensor& t) {
  if (t.dtype() == lt::float32) return t.to_vector<float>();
  lt::sync({t});
  return lt::astype(t, lt::float32).to_vector<float>();
}

// f's result natively (which it checks it was) and interpreted.
std::pair<std::vector<float>, std::vector<float>> both(const std::function<Tensor()>& f) {
  PassesOff none({});
  Tensor y = f();
  const std::string program = lt::debug::to_program({y});
  EXPECT_NE(program.find("native code"), std::string::npos) << program;
  const int64_t runs = lt::metrics::counter("JitFusedRuns");
  std::vector<float> native = floats(y);
  EXPECT_GT(lt::metrics::counter("JitFusedRuns"), runs);
  PassesOff off({"jit_fused"});
  Tensor again = f();
  EXPECT_EQ(lt::debug::to_program({again}).find("native code"), std::string::npos);
  return {native, floats(again)};
}

Tensor vec(const std::vector<float>& v) {
  return lt::tensor(v, {static_cast<int64_t>(v.size())});
}

#define SKIP_WITHOUT_JIT()                                     \
  LT_SKIP_WITHOUT_ISA(lazytrace::cpu::jit_available(), "avx2", \
                      "no native code here (a build with Xbyak, a CPU with AVX2 and FMA)")

TEST(Jit, EveryUnaryOpGivesTheInterpretersBits) {
  SKIP_WITHOUT_JIT();
  const std::vector<float> xs = all_kinds(1 << 18);
  Tensor x = vec(xs);
  lt::sync({x});
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& t) { return -t; }},
      {"abs", [](const Tensor& t) { return lt::abs(t); }},
      {"relu", [](const Tensor& t) { return lt::relu(t); }},
      {"exp", [](const Tensor& t) { return lt::exp(t); }},
      {"tanh", [](const Tensor& t) { return lt::tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return lt::sigmoid(t); }},
      {"silu", [](const Tensor& t) { return lt::silu(t); }},
      {"erf", [](const Tensor& t) { return lt::erf(t); }},
      {"gelu", [](const Tensor& t) { return lt::gelu(t); }},
      {"log", [](const Tensor& t) { return lt::log(t); }},
      {"sqrt", [](const Tensor& t) { return lt::sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return lt::rsqrt(t); }},
  };
  for (const auto& [name, op] : ops) {
    auto [native, interpreted] = both([&, &op = op] { return op(x); });
    expect_same_bits(native, interpreted, xs, name);
  }
}

TEST(Jit, EveryBinaryOpGivesTheInterpretersBits) {
  SKIP_WITHOUT_JIT();
  const std::vector<float> as = all_kinds(1 << 16);
  std::vector<float> bs(as.rbegin(), as.rend());  // every kind against every other
  Tensor a = vec(as), b = vec(bs), s = lt::scalar(0.3f);
  lt::sync({a, b, s});
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>>
      ops = {{"+", [](const Tensor& p, const Tensor& q) { return p + q; }},
             {"-", [](const Tensor& p, const Tensor& q) { return p - q; }},
             {"*", [](const Tensor& p, const Tensor& q) { return p * q; }},
             {"/", [](const Tensor& p, const Tensor& q) { return p / q; }}};
  for (const auto& [name, op] : ops) {
    auto [n1, i1] = both([&, &op = op] { return op(a, b); });
    expect_same_bits(n1, i1, as, "a " + name + " b");
    auto [n2, i2] = both([&, &op = op] { return op(a, s); });  // a 0-d tensor, read once
    expect_same_bits(n2, i2, as, "a " + name + " 0.3");
    auto [n3, i3] = both([&, &op = op] { return op(lt::full({1}, -2.5f), a); });  // a constant
    expect_same_bits(n3, i3, as, "-2.5 " + name + " a");
  }
  // comparisons, NaN's included, as where's condition
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>>
      compares = {{"==", [](const Tensor& p, const Tensor& q) { return p == q; }},
                  {"!=", [](const Tensor& p, const Tensor& q) { return p != q; }},
                  {"<", [](const Tensor& p, const Tensor& q) { return p < q; }},
                  {"<=", [](const Tensor& p, const Tensor& q) { return p <= q; }},
                  {">", [](const Tensor& p, const Tensor& q) { return p > q; }},
                  {">=", [](const Tensor& p, const Tensor& q) { return p >= q; }}};
  for (const auto& [name, op] : compares) {
    auto [n1, i1] = both([&, &op = op] { return lt::where(op(a, b), a, b); });
    expect_same_bits(n1, i1, as, "where(a " + name + " b, a, b)");
    auto [n2, i2] = both([&, &op = op] { return lt::where(op(a, s), 1.0f, 0.0f) * a; });
    expect_same_bits(n2, i2, as, "where(a " + name + " 0.3, 1, 0) * a");
  }
}

// Lengths around the vector's 16 floats and the tile's 1,024: the masked tail, and the
// parts the threads share.
TEST(Jit, EveryLengthOfTailAgreesWithAPlainLoop) {
  SKIP_WITHOUT_JIT();
  PassesOff none({});
  for (int64_t n : {1, 2, 15, 16, 17, 31, 1023, 1024, 1025, 8191, 8192 * 4 + 7}) {
    std::vector<float> xs(static_cast<size_t>(n)), bs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      xs[static_cast<size_t>(i)] = static_cast<float>(i % 97) * 0.25f - 12.0f;
      bs[static_cast<size_t>(i)] = static_cast<float>(i % 13) - 6.5f;
    }
    Tensor x = vec(xs), b = vec(bs);
    Tensor y = lt::relu(x * 1.5f + b) - b / 2.0f;
    EXPECT_NE(lt::debug::to_program({y}).find("native code"), std::string::npos);
    const std::vector<float> got = y.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float v = xs[static_cast<size_t>(i)] * 1.5f + bs[static_cast<size_t>(i)];
      ASSERT_EQ(got[static_cast<size_t>(i)], (v > 0 ? v : 0.0f) - bs[static_cast<size_t>(i)] / 2.0f)
          << "n " << n << ", element " << i;
    }
  }
}

// A chain with several inputs (one read twice), a 0-d tensor and a broadcast single value,
// two results, and more values live at once than a few registers.
TEST(Jit, AChainOfManyValuesAndTwoResults) {
  SKIP_WITHOUT_JIT();
  const int64_t n = 5000;
  std::vector<float> xs(n), ys(n), zs(n);
  for (int64_t i = 0; i < n; ++i) {
    xs[static_cast<size_t>(i)] = std::sin(static_cast<float>(i)) * 4.0f;
    ys[static_cast<size_t>(i)] = std::cos(static_cast<float>(i) * 0.7f) * 3.0f;
    zs[static_cast<size_t>(i)] = static_cast<float>(i % 11) * 0.1f + 0.05f;
  }
  Tensor x = vec(xs), y = vec(ys), z = vec(zs), s = lt::scalar(0.75f), w = lt::tensor({1.25f});
  lt::sync({x, y, z, s, w});
  auto f = [&] {
    Tensor t = lt::tanh(x * s + y);
    Tensor u = lt::sigmoid(y - x) * z;
    Tensor v = lt::exp(t * w) / (u + 1.0f);
    Tensor p = lt::sqrt(z) * t + lt::silu(u) - x * y * z;
    return std::pair{v + p, v * p - lt::abs(x)};
  };
  auto [native1, interp1] = both([&] { return f().first; });
  expect_same_bits(native1, interp1, xs, "the first result");
  PassesOff none({});
  auto [a, b] = f();
  const std::string program = lt::debug::to_program({a, b});
  EXPECT_NE(program.find("native code"), std::string::npos) << program;
  const std::vector<float> bv = b.to_vector<float>();
  PassesOff off({"jit_fused"});
  auto [a2, b2] = f();
  expect_same_bits(bv, b2.to_vector<float>(), xs, "the second result");
}

// Steps over views that are not one run of memory: each row of the last dims is a run (or one
// value), the rows a stride apart. Widths around the vector's 16 floats and the tile's 1,024.
TEST(Jit, StridedBroadcastAndMaskedStepsGiveTheInterpretersBits) {
  SKIP_WITHOUT_JIT();
  for (int64_t width : {13, 16, 30, 1000, 3001}) {
    const int64_t rows = 2 * (4096 / width + 3);
    Tensor x = lt::randn({rows, width}), w = lt::randn({width});
    Tensor mask = lt::randn({width}) > 0.0f, row_mask = lt::randn({rows, 1}) < 0.5f;
    lt::sync({x, w, mask, row_mask});
    const std::string at = "width " + std::to_string(width);
    const std::vector<std::pair<std::string, std::function<Tensor()>>> cases = {
        // softmax's exp(x - max), the norms' x * (a value per row) * (a weight per column)
        {"exp(x - max)", [&] { return lt::exp(x - lt::amax(x, {1}, true)); }},
        {"x * rowsum * w", [&] { return x * lt::sum(x, {1}, true) * w; }},
        // the causal mask's where(mask, scores, -inf), and a comparison's
        {"where(mask, x, -inf)",
         [&] { return lt::where(mask, x * 0.5f, -std::numeric_limits<float>::infinity()); }},
        {"where(row mask, x, 1)", [&] { return lt::where(row_mask, x, 1.0f) + w; }},
        {"where(x > w, x * 2, x)", [&] { return lt::where(x > w, x * 2.0f, x); }},
        {"where(x != x * 2, -x, x)", [&] { return lt::where(x != x * 2.0f, -x, x); }},
        // a column slice, and a permutation that keeps the last dim
        {"slice", [&] { return lt::slice(x, 1, width / 3, width) * 3.0f + 1.0f; }},
        {"permuted rows",
         [&] {
           return lt::tanh(lt::transpose(lt::reshape(x, {2, rows / 2, width}), 0, 1)) * 2.0f;
         }},
    };
    for (const auto& [name, f] : cases) {
      auto [native, interpreted] = both(f);
      expect_same_bits(native, interpreted, native, name + ", " + at);
    }
    // and against a plain loop
    PassesOff none({});
    const Tensor y = lt::where(mask, x - lt::amax(x, {1}, true), 0.25f) * w;
    const std::vector<float> got = y.to_vector<float>(), xs = x.to_vector<float>(),
                             ws = w.to_vector<float>();
    const std::vector<float> ms = lt::astype(mask, lt::DType::float32).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < width; ++c) m = std::max(m, xs[static_cast<size_t>(r * width + c)]);
      for (int64_t c = 0; c < width; ++c) {
        const size_t i = static_cast<size_t>(r * width + c);
        ASSERT_EQ(got[i], (ms[static_cast<size_t>(c)] != 0 ? xs[i] - m : 0.25f) *
                              ws[static_cast<size_t>(c)])
            << at << ", row " << r << ", column " << c;
      }
    }
  }
}

// Results written into parts of one tensor: the halves of a concatenation, each a row of
// its own a stride apart.
TEST(Jit, ResultsIntoStridedPlacesGiveTheInterpretersBits) {
  SKIP_WITHOUT_JIT();
  Tensor a = lt::randn({300, 40}), b = lt::randn({300, 24});
  lt::sync({a, b});
  auto [native, interpreted] = both([&] {
    return lt::concat({lt::sigmoid(a) * 2.0f, lt::exp(b) - 1.0f}, 1);
  });
  expect_same_bits(native, interpreted, native, "concat");
}

// A result written over its own input (copy_ hands the input's buffer to the output), large
// enough that its stores stream past the caches.
TEST(Jit, AResultInPlaceOfItsInput) {
  SKIP_WITHOUT_JIT();
  PassesOff none({});
  const int64_t n = int64_t{12} << 20;  // 48 MiB, beyond the last-level cache
  Tensor x = lt::randn({n});
  lt::sync({x});
  const std::vector<float> before = x.to_vector<float>();
  x.copy_(x * 2.0f + 1.0f);
  const std::string program = lt::debug::to_program({x});
  EXPECT_NE(program.find("native code"), std::string::npos) << program;
  const std::vector<float> after = x.to_vector<float>();
  for (size_t i = 0; i < before.size(); ++i)
    ASSERT_EQ(after[i], before[i] * 2.0f + 1.0f) << "element " << i;
}

// As many places read and written as the kernel has pointer registers (11), and one more,
// which is interpreted, with the same values.
TEST(Jit, ElevenPlacesAreNativeAndTwelveInterpreted) {
  SKIP_WITHOUT_JIT();
  std::vector<Tensor> in;
  for (int i = 0; i < 9; ++i) in.push_back(lt::randn({3000}));
  lt::sync(in);
  for (int inputs : {8, 9}) {
    auto f = [&] {
      Tensor sum = in[0];
      for (int i = 1; i < inputs; ++i) sum = sum * 0.5f + in[static_cast<size_t>(i)];
      return std::vector<Tensor>{lt::tanh(sum), sum * in[0], sum - in[1]};
    };
    PassesOff none({});
    const std::vector<Tensor> native = f();
    const std::string program = lt::debug::to_program(native);
    EXPECT_EQ(program.find("native code") != std::string::npos, inputs == 8) << program;
    PassesOff off({"jit_fused"});
    const std::vector<Tensor> interpreted = f();
    for (size_t r = 0; r < 3; ++r)
      expect_same_bits(native[r].to_vector<float>(), interpreted[r].to_vector<float>(),
                       in[0].to_vector<float>(), "result " + std::to_string(r));
  }
}

// jit_cache: the steps of layers that compute the same chain run one kernel, generated
// once, with the results of a kernel each (the pass off) and of the interpreter.
TEST(Jit, LayersOfOneChainShareOneKernel) {
  SKIP_WITHOUT_JIT();
  constexpr int kLayers = 6;
  std::vector<Tensor> w;
  for (int i = 0; i < kLayers; ++i) w.push_back(lt::randn({64, 64}) * 0.2f);
  Tensor x = lt::randn({8, 64});
  lt::sync(w);
  lt::sync({x});
  auto f = [&] {
    Tensor h = x;
    for (const Tensor& wi : w) h = lt::tanh(lt::matmul(h, wi)) * 0.5f + h;
    return h;
  };
  auto made = [&](const std::vector<std::string>& off) {
    PassesOff passes(off);
    const int64_t before = lt::metrics::counter("JitKernelsMade");
    Tensor y = f();
    std::vector<float> v = y.to_vector<float>();
    return std::make_pair(lt::metrics::counter("JitKernelsMade") - before, v);
  };
  const auto [shared, a] = made({});
  const auto [each, b] = made({"jit_cache"});
  const auto [none, c] = made({"jit_fused"});
  EXPECT_LE(shared, 2);  // the layers' steps, and the last one's if it stores otherwise
  EXPECT_GE(each, kLayers);
  EXPECT_EQ(none, 0);
  const std::vector<float> in = x.to_vector<float>();
  expect_same_bits(a, c, in, "shared kernel against the interpreter");
  expect_same_bits(b, c, in, "a kernel each against the interpreter");
  // another program with the same chain (the same weights, more rows) makes no new kernel
  // while a program holding the first is alive
  PassesOff none_off({});
  Tensor keep = f();
  lt::sync({keep});
  const int64_t before = lt::metrics::counter("JitKernelsMade");
  x = lt::randn({24, 64});
  lt::sync({x});
  Tensor y = f();
  lt::sync({y});
  EXPECT_EQ(lt::metrics::counter("JitKernelsMade"), before);
}

// The loop's first part runs several vectors at a time, op by op (jit_interleave): at every
// length around its passes (8 vectors of 16 floats on AVX-512, fewer on AVX2, no more than a
// row holds), with the single-vector loop and the masked tail after them, and over rows of
// 2-d steps, the same bits as one vector at a time and as the interpreter; the program says
// how many it runs.
TEST(Jit, InterleavedVectorsGiveTheSameBitsAtEveryLength) {
  SKIP_WITHOUT_JIT();
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {127}, {128}, {129}, {255}, {1000}, {3149}, {7, 300}, {20, 40}, {9, 13}}) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> xs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      xs[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * 0.37f) * 6.0f;
    xs[5] = NAN;
    xs[static_cast<size_t>(n - 1)] = -std::numeric_limits<float>::infinity();
    // 2-d: the rows a slice of wider ones, so that they stay rows of shape.back() floats
    Tensor x = lt::tensor(xs, lazytrace::Shape(shape));
    if (shape.size() > 1) x = lt::concat({x, lt::zeros({shape[0], 5})}, 1);
    lt::sync({x});
    if (shape.size() > 1) x = lt::slice(x, 1, 0, shape[1]);
    auto f = [&] {  // kernels_bench's chain with tanh and sigmoid
      Tensor v = lt::tanh(x * 1.5f + 0.25f);
      v = lt::sigmoid(v * 2.0f - 0.5f);
      return lt::relu(v * x);
    };
    const std::string at = "shape " + lazytrace::Shape(shape).str();
    auto [native, interpreted] = both(f);
    expect_same_bits(native, interpreted, xs, "interleaved against the interpreter, " + at);
    {
      PassesOff none({});
      const std::string program = lt::debug::to_program({f()});
      // 8 vectors of 16 floats on AVX-512; on AVX2, 5 of 8 floats, one value register each
      // (its 5), x read in place where it is used; or as many as a row holds
      const bool wide = lazytrace::cpu::has_avx512();
      const int64_t vectors = std::min<int64_t>(wide ? 8 : 5, shape.back() / (wide ? 16 : 8));
      if (vectors > 1) {
        EXPECT_NE(program.find(std::to_string(vectors) + " vectors at a time"), std::string::npos)
            << program;
      }
      if (shape.back() < 16) {
        EXPECT_EQ(program.find("vectors at a time"), std::string::npos) << program;
      }
    }
    PassesOff off({"jit_interleave"});
    Tensor one = f();
    const std::string program = lt::debug::to_program({one});
    EXPECT_NE(program.find("native code"), std::string::npos) << program;
    EXPECT_EQ(program.find("vectors at a time"), std::string::npos) << program;
    expect_same_bits(native, one.to_vector<float>(), xs, "interleaved against one vector, " + at);
  }
}

// The constants the ops' code loads whole (a polynomial's first coefficient, a division's
// numerator) stay in registers the step's values leave free (jit_constants, AVX-512): the
// same bits as broadcasting them at each use, and as the interpreter; the program says how
// many. A step whose values take every register keeps none there.
TEST(Jit, OpsConstantsInRegistersGiveTheSameBits) {
  SKIP_WITHOUT_JIT();
  const std::vector<float> xs = all_kinds(1 << 14);
  Tensor x = vec(xs);
  lt::sync({x});
  struct Case {
    std::string name;
    std::function<Tensor()> f;
    int constants;  // on AVX-512
  };
  const std::vector<Case> cases = {
      {"tanh", [&] { return lt::tanh(x); }, 3},
      {"sigmoid", [&] { return lt::sigmoid(x); }, 2},
      {"erf", [&] { return lt::erf(x); }, 4},
      {"log of rsqrt", [&] { return lt::log(lt::rsqrt(x)); }, 2},
      {"chain",
       [&] {
         Tensor v = lt::tanh(x * 1.5f + 0.25f);
         v = lt::sigmoid(v * 2.0f - 0.5f);
         return lt::relu(v * x);
       },
       4},
  };
  for (const Case& c : cases) {
    auto [native, interpreted] = both(c.f);
    expect_same_bits(native, interpreted, xs, c.name + " against the interpreter");
    {
      PassesOff none({});
      const std::string program = lt::debug::to_program({c.f()});
      if (lazytrace::cpu::has_avx512()) {
        EXPECT_NE(program.find(std::to_string(c.constants) + " constants in registers"),
                  std::string::npos)
            << c.name << ": " << program;
      }
    }
    PassesOff off({"jit_constants"});
    Tensor y = c.f();
    const std::string program = lt::debug::to_program({y});
    EXPECT_NE(program.find("native code"), std::string::npos) << program;
    EXPECT_EQ(program.find("constants in registers"), std::string::npos) << program;
    expect_same_bits(native, y.to_vector<float>(), xs, c.name + " against broadcasts");
  }
  // 22 single values, each in a register for the whole kernel, and the values live at
  // once take every register: no constant kept
  // (recorded in each call: pending tensors held at a sync would be its results too)
  auto many = [&] {
    std::vector<Tensor> parts;
    for (int i = 0; i < 22; ++i) parts.push_back(x * static_cast<float>(i + 2));
    Tensor sum = lt::tanh(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) sum = sum + lt::tanh(parts[i]);
    return sum;
  };
  auto [native, interpreted] = both(many);
  expect_same_bits(native, interpreted, xs, "22 single values against the interpreter");
  PassesOff none({});
  const std::string program = lt::debug::to_program({many()});
  EXPECT_EQ(program.find("constants in registers"), std::string::npos) << program;
}

// An exp, tanh, sigmoid or silu whose operand stays where its clamps never act runs without
// them (pass jit_ranges): decided from the step's scalars at each run, so that one compiled
// graph gets code without the clamps for a scale that keeps the values in range and keeps
// them for one that does not. Both give the interpreter's bits, NaN and infinities included.
TEST(Jit, OpsWhoseValuesStayInRangeRunWithoutTheirClamps) {
  SKIP_WITHOUT_JIT();
  const std::vector<float> xs = all_kinds(1 << 14);
  Tensor x = vec(xs);
  lt::sync({x});
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> f;  // of the scale
    float in_range, out_of_range;            // scales
  };
  const std::vector<Case> cases = {
      {"sigmoid(c tanh(x) - 0.5)",
       [&](const Tensor& c) { return lt::sigmoid(c * lt::tanh(x) - 0.5f); }, 2.0f, 1000.0f},
      {"exp(c tanh(x))", [&](const Tensor& c) { return lt::exp(c * lt::tanh(x)); }, 80.0f, 100.0f},
      {"tanh(c sigmoid(x))", [&](const Tensor& c) { return lt::tanh(c * lt::sigmoid(x)); }, 9.0f,
       100.0f},
      {"silu(c tanh(x))", [&](const Tensor& c) { return lt::silu(c * lt::tanh(x)); }, 50.0f,
       100.0f},
      {"exp(tanh(x) / c)", [&](const Tensor& c) { return lt::exp(lt::tanh(x) / c); }, 0.25f,
       0.001f},
      // past float's largest and back: in double the values stay within [-1, 1]
      {"exp(tanh(x) c c / c / c)",
       [&](const Tensor& c) { return lt::exp(lt::tanh(x) * c * c / c / c); }, 2.0f, 1e30f},
  };
  for (const Case& k : cases) {
    for (const bool in_range : {true, false}) {
      const Tensor c = lt::scalar(in_range ? k.in_range : k.out_of_range);
      const std::string what = k.name + (in_range ? " in range" : " out of range");
      const int64_t ranged = lt::metrics::counter("JitRangedRuns");
      auto [native, interpreted] = both([&] { return k.f(c); });
      expect_same_bits(native, interpreted, xs, what);
      EXPECT_EQ(lt::metrics::counter("JitRangedRuns") - ranged, in_range ? 1 : 0) << what;
      PassesOff off({"jit_ranges"});
      const int64_t before = lt::metrics::counter("JitRangedRuns");
      expect_same_bits(k.f(c).to_vector<float>(), interpreted, xs, what + ", jit_ranges off");
      EXPECT_EQ(lt::metrics::counter("JitRangedRuns"), before) << what;
    }
  }
  // the code for a set of ops spared is made once; without scalars, ranges are known when
  // the step compiles (tanh's values, in [-1, 1], never reach sigmoid's clamps)
  const Tensor c = lt::scalar(2.0f);
  auto f = [&] { return lt::sigmoid(c * lt::tanh(x) - 0.5f); };
  f().to_vector<float>();
  const int64_t made = lt::metrics::counter("JitKernelsMade");
  f().to_vector<float>();
  EXPECT_EQ(lt::metrics::counter("JitKernelsMade"), made);
  PassesOff none({});
  EXPECT_NE(lt::debug::to_program({f()}).find("clamps checked at each run"), std::string::npos);
  const int64_t ranged = lt::metrics::counter("JitRangedRuns");
  auto [native, interpreted] = both([&] { return lt::sigmoid(lt::tanh(x)); });
  expect_same_bits(native, interpreted, xs, "sigmoid(tanh(x))");
  EXPECT_EQ(lt::metrics::counter("JitRangedRuns") - ranged, 1);
  EXPECT_NE(lt::debug::to_program({lt::sigmoid(lt::tanh(x))}).find("clamps left out"),
            std::string::npos);
  // where memory's values reach an operand, no run checks (softmax's exp(x - max) * c)
  EXPECT_EQ(lt::debug::to_program({lt::exp((x - lt::amax(x)) * c)}).find("clamps"),
            std::string::npos);
}

// value_ranges' rules, each against the exact interval: a bound is never inside it by more
// than float rounding, and an op without a rule, a division by an interval holding 0 or an
// inf - inf gives everything. needs_no_clamps' limits, each side of them.
TEST(Jit, ValueRangesHoldEveryValueAnOpCanTake) {
  namespace cpu = lazytrace::cpu;
  using K = lazytrace::ir::OpKind;
  cpu::FusedStep st;
  st.loads.resize(2);  // 0: memory, 1: one value
  auto ins = [&](K op, int a = -1, int b = -1, int load = -1) {
    cpu::Instr i{};
    i.op = op;
    i.dst = static_cast<int>(st.program.size());
    i.src[0] = a;
    i.src[1] = b;
    i.load = load;
    st.program.push_back(i);
    return i.dst;
  };
  const int x = ins(K::Data, -1, -1, 0), c = ins(K::Data, -1, -1, 1);
  const int t = ins(K::Tanh, x), ct = ins(K::Mul, c, t), shifted = ins(K::Sub, ct, c);
  const int sg = ins(K::Sigmoid, shifted), e = ins(K::Exp, t), r = ins(K::Relu, x);
  const int q = ins(K::Div, t, c), free_div = ins(K::Div, t, x), sin = ins(K::Sin, t);
  const int inf_minus_inf = ins(K::Sub, r, r), ab = ins(K::Abs, shifted), sq = ins(K::Sqrt, r);
  st.num_regs = static_cast<int>(st.program.size());
  const double inf = std::numeric_limits<double>::infinity();
  auto near = [](cpu::Interval got, double lo, double hi) {
    const double slack = 1e-5;
    return got.lo <= lo && got.hi >= hi && got.lo >= lo - slack * (1 + std::fabs(lo)) &&
           got.hi <= hi + slack * (1 + std::fabs(hi));
  };
  auto everything = [&](cpu::Interval v) { return v.lo == -inf && v.hi == inf; };
  {
    const auto v = cpu::value_ranges(st, {std::nullopt, 2.0});
    EXPECT_TRUE(everything(v[static_cast<size_t>(x)]));
    EXPECT_TRUE(near(v[static_cast<size_t>(t)], -1, 1));
    EXPECT_TRUE(near(v[static_cast<size_t>(ct)], -2, 2));
    EXPECT_TRUE(near(v[static_cast<size_t>(shifted)], -4, 0));
    EXPECT_TRUE(near(v[static_cast<size_t>(sg)], 1 / (1 + std::exp(4.0)), 0.5));
    EXPECT_TRUE(near(v[static_cast<size_t>(e)], std::exp(-1.0), std::exp(1.0)));
    EXPECT_EQ(v[static_cast<size_t>(r)].lo, 0);
    EXPECT_EQ(v[static_cast<size_t>(r)].hi, inf);
    EXPECT_TRUE(near(v[static_cast<size_t>(q)], -0.5, 0.5));
    EXPECT_TRUE(everything(v[static_cast<size_t>(free_div)]));
    EXPECT_TRUE(everything(v[static_cast<size_t>(sin)]));
    EXPECT_TRUE(everything(v[static_cast<size_t>(inf_minus_inf)]));
    EXPECT_TRUE(near(v[static_cast<size_t>(ab)], 0, 4));
    EXPECT_TRUE(v[static_cast<size_t>(sq)].lo <= 0 && v[static_cast<size_t>(sq)].lo > -1e-30);
    EXPECT_TRUE(cpu::needs_no_clamps(K::Sigmoid, v[static_cast<size_t>(shifted)]));
    EXPECT_TRUE(cpu::needs_no_clamps(K::Exp, v[static_cast<size_t>(shifted)]));
    EXPECT_FALSE(cpu::needs_no_clamps(K::Exp, v[static_cast<size_t>(x)]));
  }
  for (const double bad : {0.0, std::nan("")}) {  // t / 0, t / NaN, NaN * t
    const auto v = cpu::value_ranges(st, {std::nullopt, bad});
    EXPECT_TRUE(everything(v[static_cast<size_t>(q)])) << bad;
    if (bad != 0) {
      EXPECT_TRUE(everything(v[static_cast<size_t>(shifted)]));
    }
  }
  {  // inf * t - inf: inf - inf; t / inf: 0
    const auto v = cpu::value_ranges(st, {std::nullopt, inf});
    EXPECT_TRUE(everything(v[static_cast<size_t>(shifted)]));
    EXPECT_TRUE(near(v[static_cast<size_t>(q)], 0, 0));
  }
  EXPECT_TRUE(everything(cpu::value_ranges(st, {})[static_cast<size_t>(ct)]));  // c unknown
  const double lo = lazytrace::cpu::math::kExpLo;                               // exp's lowest
  EXPECT_TRUE(cpu::needs_no_clamps(K::Exp, {lo, 88.0}));
  EXPECT_FALSE(cpu::needs_no_clamps(K::Exp, {lo - 1e-3, 0}));
  EXPECT_FALSE(cpu::needs_no_clamps(K::Exp, {0, 88.01}));
  EXPECT_TRUE(cpu::needs_no_clamps(K::Sigmoid, {-88.0, -lo}));
  EXPECT_FALSE(cpu::needs_no_clamps(K::Silu, {-88.01, 0}));
  EXPECT_TRUE(cpu::needs_no_clamps(K::Tanh, {-10, 10}));
  EXPECT_FALSE(cpu::needs_no_clamps(K::Tanh, {-10.01, 0}));
  EXPECT_FALSE(cpu::needs_no_clamps(K::Erf, {-1, 1}));  // erf keeps its clamp
}

// Comparisons stored as bools (a relu's mask kept for its backward), beside a float result
// and alone, and a bool loaded and stored again: the interpreter's bytes at every length of
// tail, NaN comparing false.
TEST(Jit, BoolsStoredGiveTheInterpretersBytes) {
  SKIP_WITHOUT_JIT();
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 1023, 1025, 8192 * 4 + 7}) {
    std::vector<float> xs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      xs[static_cast<size_t>(i)] = i % 29 == 3 ? NAN : static_cast<float>(i * 7 % 23) - 11.0f;
    Tensor x = vec(xs), m = x > 2.0f;
    lt::sync({x, m});
    const std::vector<std::function<Tensor()>> cases = {
        [&] { return x * 2.0f > x; },
        [&] { return lt::where(m, 1.0f, 0.0f) > 0.5f; },  // a bool read, then one stored
        [&] { return lt::where(m, x, -x) <= 0.0f; },
    };
    for (size_t c = 0; c < cases.size(); ++c) {
      auto [native, interpreted] = both(cases[c]);
      EXPECT_EQ(native, interpreted) << "case " << c << ", n " << n;
      int64_t ones = 0;
      for (float v : native) ones += v == 1.0f;
      if (n >= 16) {
        EXPECT_GT(ones, 0) << "case " << c << ", n " << n;
      }
    }
    // a float result and a bool one from one step, as a relu and its mask
    PassesOff none({});
    Tensor r = lt::relu(x * 1.5f), mask = x * 1.5f > 0.0f;
    const std::string program = lt::debug::to_program({r, mask});
    EXPECT_NE(program.find("native code"), std::string::npos) << program;
    const int64_t runs = lt::metrics::counter("JitFusedRuns");
    lt::sync({r, mask});
    EXPECT_GT(lt::metrics::counter("JitFusedRuns"), runs);
    const std::vector<float> rv = r.to_vector<float>(), mv = floats(mask);
    for (int64_t i = 0; i < n; ++i) {
      const float v = xs[static_cast<size_t>(i)] * 1.5f;
      ASSERT_EQ(mv[static_cast<size_t>(i)], v > 0.0f ? 1.0f : 0.0f) << "n " << n << " at " << i;
      if (!std::isnan(v)) {
        ASSERT_EQ(rv[static_cast<size_t>(i)], v > 0.0f ? v : 0.0f);
      }
    }
  }
}

// What the generator does not take is interpreted, with the same values as with the pass
// off: a float64 chain, a load strided along its last dim (transposed), an op without
// native code (sin).
TEST(Jit, StepsItDoesNotTakeAreInterpreted) {
  SKIP_WITHOUT_JIT();
  PassesOff none({});
  Tensor x = lt::randn({40, 30}), d = lt::randn({40, 30}, lt::DType::float64);
  lt::sync({x, d});
  const std::vector<std::function<Tensor()>> cases = {
      [&] { return d * 2.0 + 1.0; },
      [&] { return lt::transpose(x) * 2.0f + 1.0f; },
      [&] { return lt::sin(x * x + 1.0f); },
  };
  for (const auto& f : cases) {
    Tensor y = f();
    EXPECT_EQ(lt::debug::to_program({y}).find("native code"), std::string::npos)
        << lt::debug::to_program({y});
    std::vector<double> got = lt::astype(y, lt::DType::float64).to_vector<double>(), want;
    {
      PassesOff off({"jit_fused"});
      want = lt::astype(f(), lt::DType::float64).to_vector<double>();
    }
    EXPECT_EQ(got, want) << lt::debug::to_program({y});
  }
}

}  // namespace

// bfloat16 steps (AVX-512): loads widened, every op's result rounded to bfloat16, casts both
// ways (the rounding of every kind of float: ties, NaN, infinities, denormals), bfloat16
// constants, row values and results, at every length of tail: the interpreter's bits.
TEST(Jit, Bfloat16StepsGiveTheInterpretersBits) {
  LT_SKIP_WITHOUT_ISA(lazytrace::cpu::has_avx512() && __builtin_cpu_supports("avx512bw"), "avx512",
                      "bfloat16 steps run natively on AVX-512 (with BW) only");
  const std::vector<float> xs = all_kinds(1 << 16);
  const std::vector<float> ys(xs.rbegin(), xs.rend());
  Tensor x32 = vec(xs), y32 = vec(ys);
  Tensor x = lt::astype(x32, lt::bfloat16), y = lt::astype(y32, lt::bfloat16);
  lt::sync({x32, y32, x, y});
  const std::vector<std::pair<std::string, std::function<Tensor()>>> steps = {
      {"astype(x32, bf16)", [&] { return lt::astype(x32 * 1.0f, lt::bfloat16); }},
      {"x + y", [&] { return x + y; }},
      {"x * y - x / y", [&] { return x * y - x / y; }},
      {"x * 0.3 + 1", [&] { return x * 0.3f + 1.0f; }},
      {"x * y32 (float32)", [&] { return x * y32; }},
      {"astype(x, f32) * 3", [&] { return lt::astype(x, lt::float32) * 3.0f; }},
      {"exp(x)", [&] { return lt::exp(x); }},
      {"tanh(x)", [&] { return lt::tanh(x); }},
      {"sigmoid(x) * y", [&] { return lt::sigmoid(x) * y; }},
      {"silu(x)", [&] { return lt::silu(x); }},
      {"gelu(x)", [&] { return lt::gelu(x); }},
      {"rsqrt(x)", [&] { return lt::rsqrt(x); }},
      {"relu(-x)", [&] { return lt::relu(-x); }},
      {"where(x < y, x, y)", [&] { return lt::where(x < y, x, y); }},
  };
  for (const auto& [name, f] : steps) {
    auto [native, interpreted] = both(f);
    expect_same_bits(native, interpreted, xs, name);
  }
  // a bfloat16 value per row (a [rows, 1] column) beside rows of float32 and of bfloat16
  const int64_t rows = 64, width = 70;
  Tensor col = lt::slice(lt::reshape(lt::slice(x, 0, 0, rows * width), {rows, width}), 1, 5, 6);
  Tensor m32 = lt::reshape(lt::slice(y32, 0, 0, rows * width), {rows, width});
  Tensor m = lt::reshape(lt::slice(y, 0, 0, rows * width), {rows, width});
  lt::sync({col, m32, m});
  auto [n1, i1] = both([&] { return lt::exp(m - col); });
  expect_same_bits(n1, i1, ys, "exp(m - column)");
  auto [n2, i2] = both([&] { return m32 / col; });
  expect_same_bits(n2, i2, ys, "m32 / column");
  // every length of tail, and lengths the threads share
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 1023, 1025, 4097, 20000}) {
    Tensor a = lt::slice(x, 0, 0, n), b = lt::slice(y, 0, 0, n);
    lt::sync({a, b});
    auto [native, interpreted] = both([&] { return lt::sigmoid(a) * 2.0f + b; });
    expect_same_bits(native, interpreted, xs, "sigmoid(a) * 2 + b, " + std::to_string(n));
  }
}
