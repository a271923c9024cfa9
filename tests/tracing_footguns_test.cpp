// Every way lazy tracing can surprise a user, pinned down as a test (after tinygrad's
// test_jit_footguns.py). Each test states the behaviour and why.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include "expect_error.h"

namespace {

int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

// A host-side `if` on a tensor needs its value now: it syncs in the middle of a step.
TEST(Footguns, HostIfOnATensorForcesASync) {
  auto x = lt::tensor({3.0f});
  auto y = x * 2.0f;
  lt::metrics::reset();
  if (lt::sum(y) > 5.0f) y = y + 1.0f;
  EXPECT_EQ(counter("ExecuteCount"), 1);
  EXPECT_EQ(y.item<float>(), 7.0f);
}

// A value read with item() becomes a plain number: later changes to its source are not seen.
TEST(Footguns, ItemInsideAStepIsAConstantOfThatStep) {
  auto scale = lt::tensor({2.0f});
  auto x = lt::tensor({1.0f, 2.0f});
  float s = scale.item<float>();
  auto y = x * s;
  scale.copy_(lt::tensor({10.0f}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4}));  // not 10, 20
  auto z = x * scale;  // kept as a tensor, the new value is used
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{10, 20}));
}

// A branch taken on the host is baked into the graph: each branch is its own graph.
TEST(Footguns, HostBranchesMakeOneGraphPerPath) {
  auto x = lt::tensor({1.0f, -1.0f});
  auto step = [&](bool use_relu) { return use_relu ? lt::relu(x) * 3.0f : lt::tanh(x) * 3.0f; };
  lt::metrics::reset();
  for (int i = 0; i < 4; ++i) (void)step(i % 2 == 0).to_vector<float>();
  EXPECT_EQ(counter("CompileCount"), 2);
  EXPECT_EQ(counter("CacheHit"), 2);
}

// 0, 1 and -1 are part of the graph; every other number is a parameter. A scalar that
// passes through 0 or 1 therefore compiles its own graph, once.
TEST(Footguns, ScalarsZeroAndOneAreBakedIn) {
  auto x = lt::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  lt::metrics::reset();
  for (float lr : {0.5f, 0.25f, 1.0f, 0.0f, 0.125f}) (void)(x * lr).to_vector<float>();
  EXPECT_EQ(counter("CompileCount"), 3);  // params, x*1 (simplified to x), x*0
}

// Rebinding a C++ variable is not an update: holders of the old tensor keep it.
TEST(Footguns, RebindingIsNotCopy) {
  auto w = lt::tensor({1.0f});
  lt::Tensor held = w;
  w = lt::tensor({5.0f});  // rebinds the variable only
  EXPECT_EQ(held.item<float>(), 1.0f);
  lt::Tensor held2 = w;
  w.copy_(lt::tensor({9.0f}));  // updates the tensor itself
  EXPECT_EQ(held2.item<float>(), 9.0f);
}

// Each read of a pending tensor syncs; reading inside a loop runs a graph per read.
TEST(Footguns, ReadingInALoopSyncsEachTime) {
  auto x = lt::tensor({1.0f});
  lt::metrics::reset();
  float total = 0;
  for (int i = 0; i < 5; ++i) total += (x * static_cast<float>(i + 2)).item<float>();
  EXPECT_EQ(counter("ExecuteCount"), 5);
  EXPECT_EQ(total, 2 + 3 + 4 + 5 + 6);
  EXPECT_EQ(counter("CompileCount"), 1);
}

// sync() computes every live pending tensor, including ones unrelated to what you need.
TEST(Footguns, SyncComputesUnrelatedLiveTensors) {
  auto a = lt::tensor({1.0f}) * 2.5f;
  auto unrelated = lt::exp(lt::tensor({0.0f}));
  lt::sync();
  EXPECT_FALSE(unrelated.is_pending());
  auto b = lt::tensor({1.0f}) * 3.5f;
  auto other = lt::exp(lt::tensor({0.0f}));
  lt::sync({b});  // only what is asked for
  EXPECT_TRUE(other.is_pending());
}

// Random ops take counters in the order they are recorded: reordering draws changes values.
TEST(Footguns, RandomDrawsDependOnRecordingOrder) {
  lt::manual_seed(5);
  auto a1 = lt::rand({4}).to_vector<float>();
  auto b1 = lt::rand({4}).to_vector<float>();
  lt::manual_seed(5);
  auto b2 = lt::rand({4}).to_vector<float>();
  EXPECT_EQ(a1, b2);  // the first draw after the seed, whatever it is called
  EXPECT_NE(b1, b2);
}

// Buffers are never written in place: a clone or a copy taken before copy_ keeps the old value.
TEST(Footguns, OldValuesSurviveCopyInto) {
  auto w = lt::tensor({1.0f, 2.0f});
  auto before = lt::clone(w);
  auto doubled = w * 2.0f;  // recorded against the old value
  w.copy_(lt::tensor({7.0f, 8.0f}));
  EXPECT_EQ(before.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(doubled.to_vector<float>(), (std::vector<float>{2, 4}));
}

// assume_pure: a captured tensor is read at each call, but the captured *variable* is not:
// a lambda that captured the handle by value keeps it, so rebinding the variable outside is
// not seen (copy_ into the tensor is).
TEST(Footguns, AssumePureSeesCopyIntoACapturedTensorButNotRebinding) {
  lt::Tensor w = lt::tensor({2.0f});
  auto f = lt::assume_pure([w](const lt::Tensor& x) { return x * w; });
  lt::Tensor x = lt::tensor({1.0f});
  w = lt::tensor({10.0f});  // rebinding: the lambda still holds the old tensor
  EXPECT_EQ(f(x).item<float>(), 2.0f);
  auto g = lt::assume_pure([&w](const lt::Tensor& x) { return x * w; });
  EXPECT_EQ(g(x).item<float>(), 10.0f);
  w = lt::tensor({20.0f});  // by reference: the trace lifted the tensor w held then
  EXPECT_EQ(g(x).item<float>(), 10.0f);
  w.copy_(lt::tensor({30.0f}));  // but the tensor it lifted is w's old one, not this
  EXPECT_EQ(g(x).item<float>(), 10.0f);
}

// assume_pure: a host number used inside is part of the trace, frozen at its first value
// (unlike a tensor or a static argument, which are inputs or part of the key).
TEST(Footguns, AHostNumberInsideAssumePureIsFrozen) {
  double scale = 2.0;
  auto f = lt::assume_pure([&scale](const lt::Tensor& x) { return x * scale; });
  lt::Tensor x = lt::tensor({1.0f});
  EXPECT_EQ(f(x).item<float>(), 2.0f);
  scale = 5.0;
  EXPECT_EQ(f(x).item<float>(), 2.0f);  // the traced graph still multiplies by 2
  auto g = lt::assume_pure([](const lt::Tensor& x, double s) { return x * s; });
  EXPECT_EQ(g(x, 5.0).item<float>(), 5.0f);  // as a static argument it is part of the key
}

// compile without full_graph: a function that reads a value runs as plain code, syncing
// where it reads, on every call (it cannot be replayed as one graph).
TEST(Footguns, CompileWithAReadInsideRunsAsPlainCode) {
  auto step = lt::compile([](const lt::Tensor& x) { return x * lt::sum(x).item<float>(); },
                          {.name = "reads"});
  lt::Tensor x = lt::tensor({1.0f, 2.0f});
  lt::sync();
  lt::metrics::reset();
  for (int i = 0; i < 3; ++i) step(x);
  EXPECT_EQ(counter("CompiledFnTrace"), 1);  // tried once, then run as plain code
  EXPECT_EQ(counter("ExecuteCount"), 6);     // the read and the result, each call
}

// A tensor made inside a traced function has no value outside it: keeping one (in a
// captured list, a member) and using it after the call is an lt::Error, in an op or a sync.
TEST(Footguns, ATensorKeptFromInsideATraceIsAnErrorOutsideIt) {
  std::vector<lt::Tensor> kept;
  auto f = lt::assume_pure([&kept](const lt::Tensor& x) {
    kept.push_back(x * 2.0f);
    return x + 1.0f;
  });
  lt::Tensor y = f(lt::tensor({1.0f}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2}));
  ASSERT_EQ(kept.size(), 1u);
  expect_error([&] { (void)(kept[0] + 1.0f); }, {"[trace]", "made inside a traced function"});
  expect_error([&] { (void)kept[0].to_vector<float>(); }, {"made inside a traced function"});
}

}  // namespace
