// assume_pure: traced once per signature, recorded as one node per call, values and
// gradients equal to the plain function, closures and randomness seen fresh on each call,
// and impurity made loud.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "expect_error.h"
#include "tiny_decoder.h"

namespace {

using lt::Tensor;
namespace nn = lt::nn;

int64_t counter(const char* name) {
  return lt::metrics::counter(name);
}

Tensor random_tensor(const lt::Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = static_cast<float>(n(rng));
  return lt::tensor(v, shape);
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], tol * (1 + std::fabs(y[i]))) << what << " element " << i;
}

TEST(AssumePure, DoMathIsTracedOnceOver1000Calls) {
  auto plain = [](const Tensor& a, const Tensor& b, double c) { return lt::matmul(a, b) + c; };
  auto do_math = lt::assume_pure(plain);
  Tensor x = random_tensor({4, 3}, 1), y = random_tensor({3, 5}, 2);
  lt::metrics::reset();
  Tensor last;
  for (int i = 0; i < 1000; ++i) {
    last = do_math(x, y, 42.0);
    if (i % 100 == 0) lt::sync();
  }
  EXPECT_EQ(counter("AssumePureTrace"), 1);
  EXPECT_EQ(counter("AssumePureHit"), 999);
  expect_close(last, plain(x, y, 42.0), 1e-6, "do_math");
  // a new static value or shape is a new trace
  do_math(x, y, 43.0);
  do_math(random_tensor({2, 3}, 3), y, 42.0);
  EXPECT_EQ(counter("AssumePureTrace"), 3);
}

// The key takes each leaf's type times a number for its position, from a table for the
// first 4096 leaves and computed past it: thousands of leaves are traced once, and a leaf of
// another shape past the table, at one place or the next, makes a signature of its own.
TEST(AssumePure, ThousandsOfLeavesAreTracedOnceAndEachPlaceOfANewShapeRetraces) {
  auto plain = [](const std::vector<Tensor>& ts) {
    Tensor s = lt::sum(ts[0]);
    for (size_t i = 1; i < ts.size(); ++i) s = s + lt::sum(ts[i]) * static_cast<float>(i % 7);
    return s;
  };
  auto f = lt::assume_pure(plain);
  std::vector<Tensor> ts;
  double expected = 0;
  for (size_t i = 0; i < 5000; ++i) {
    const float v = static_cast<float>(i % 11) - 5.0f;
    ts.push_back(lt::tensor(std::vector<float>{v}, lt::Shape{1}));
    expected += v * static_cast<double>(i == 0 ? 1 : i % 7);
  }
  lt::metrics::reset();
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(f(ts).item<float>(), expected, 1e-3 * std::fabs(expected));
  EXPECT_EQ(counter("AssumePureTrace"), 1);
  // a [2] at leaf 4500, or at 4501: two new signatures, each traced once
  std::vector<Tensor> swapped = ts, again = ts;
  swapped[4500] = lt::tensor(std::vector<float>{1.0f, 2.0f}, lt::Shape{2});
  again[4501] = lt::tensor(std::vector<float>{1.0f, 2.0f}, lt::Shape{2});
  const double w0 = 4500 % 7, w1 = 4501 % 7;
  const double base = expected - ts[4500].item<float>() * w0 - ts[4501].item<float>() * w1;
  for (int k = 0; k < 2; ++k) {
    EXPECT_NEAR(f(swapped).item<float>(), base + 3 * w0 + ts[4501].item<float>() * w1, 1e-2);
    EXPECT_NEAR(f(again).item<float>(), base + ts[4500].item<float>() * w0 + 3 * w1, 1e-2);
  }
  EXPECT_EQ(counter("AssumePureTrace"), 3);
}

TEST(AssumePure, ACallRecordsAFixedNumberOfNodesWhateverTheFunctionDoes) {
  auto deep = lt::assume_pure([](const Tensor& x) {
    Tensor h = x;
    for (int i = 0; i < 500; ++i) h = lt::tanh(h * 1.01f + 0.1f);
    return h;
  });
  Tensor x = random_tensor({8}, 4);
  deep(x);  // trace
  const int64_t before = counter("TraceCount");
  Tensor y = deep(x);
  EXPECT_LE(counter("TraceCount") - before, 3);  // the call and its result
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    double h = xv[i];
    for (int k = 0; k < 500; ++k) h = std::tanh(static_cast<float>(h * 1.01f + 0.1f));
    EXPECT_NEAR(yv[i], h, 1e-4);
  }
}

struct MyModule : nn::Module {
  std::shared_ptr<nn::Linear> linear;
  MyModule() { linear = register_module("linear", std::make_shared<nn::Linear>(10, 10)); }
  Tensor forward(const Tensor& x) const { return (*linear)(x); }
  std::string name() const override { return "MyModule"; }
};

TEST(AssumePure, TheSpecsModuleExampleOver1000Steps) {
  auto module = std::make_shared<MyModule>();
  auto pure_forward = [module](const nn::ParamMap& params, const nn::ParamMap& buffers,
                               const Tensor& x) {
    return nn::functional_call(*module, params, buffers, x);
  };
  auto cached_forward = lt::assume_pure(pure_forward);
  nn::ParamMap params = module->named_parameters();
  nn::ParamMap buffers = module->named_buffers();
  lt::sync();
  lt::metrics::reset();
  for (int i = 0; i < 1000; ++i) {
    Tensor x = lt::randn({5, 10});
    Tensor y = cached_forward(params, buffers, x);
    if (i % 250 == 0) expect_close(y, module->forward(x), 1e-6, "step " + std::to_string(i));
    if (i % 50 == 0) lt::sync();
  }
  EXPECT_EQ(counter("AssumePureTrace"), 1);
}

// ---- gradients equal those of the plain function

void expect_same_grads(const std::function<Tensor(const std::vector<Tensor>&)>& plain,
                       const std::function<Tensor(const std::vector<Tensor>&)>& pure,
                       std::vector<Tensor> inputs, const std::string& what) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) {
    a.push_back(t.detach());
    b.push_back(t.detach());
    if (t.requires_grad()) {
      a.back().requires_grad_();
      b.back().requires_grad_();
    }
  }
  Tensor ya = plain(a), yb = pure(b);
  expect_close(yb, ya, 1e-6, what + " value");
  lt::sum(ya * ya).backward();
  lt::sum(yb * yb).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(a[i].grad().defined(), b[i].grad().defined()) << what << " input " << i;
    if (a[i].grad().defined())
      expect_close(b[i].grad(), a[i].grad(), 1e-5, what + " gradient " + std::to_string(i));
  }
}

TEST(AssumePureGrad, MatmulTanhStaticDoubleNestedAndMlp) {
  auto mm = [](const Tensor& a, const Tensor& b) { return lt::matmul(a, b); };
  auto pure_mm = lt::assume_pure(mm);
  expect_same_grads(
      [&](const auto& x) { return mm(x[0], x[1]); },
      [&](const auto& x) { return pure_mm(x[0], x[1]); },
      {random_tensor({3, 4}, 5).requires_grad_(), random_tensor({4, 2}, 6).requires_grad_()},
      "matmul");

  auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return a * lt::tanh(b) + c * c;
  };
  auto pure_f = lt::assume_pure(f);
  expect_same_grads([&](const auto& x) { return f(x[0], x[1], x[2]); },
                    [&](const auto& x) { return pure_f(x[0], x[1], x[2]); },
                    {random_tensor({5}, 7).requires_grad_(), random_tensor({5}, 8),
                     random_tensor({5}, 9).requires_grad_()},
                    "a*tanh(b)+c*c with b not requiring grad");

  auto scaled = [](const Tensor& a, double s) { return lt::exp(a * s); };
  auto pure_scaled = lt::assume_pure(scaled);
  expect_same_grads([&](const auto& x) { return scaled(x[0], 0.7); },
                    [&](const auto& x) { return pure_scaled(x[0], 0.7); },
                    {random_tensor({2, 3}, 10).requires_grad_()}, "static double");

  auto inner_fn = [](const Tensor& a) { return lt::sigmoid(a) * a; };
  auto inner = lt::assume_pure(inner_fn);
  auto outer = lt::assume_pure([inner](const Tensor& a, const Tensor& b) {
    return lt::matmul(inner(a), b) + lt::sum(inner(b));
  });
  expect_same_grads(
      [&](const auto& x) { return lt::matmul(inner_fn(x[0]), x[1]) + lt::sum(inner_fn(x[1])); },
      [&](const auto& x) { return outer(x[0], x[1]); },
      {random_tensor({3, 4}, 11).requires_grad_(), random_tensor({4, 2}, 12).requires_grad_()},
      "nested assume_pure");

  auto mlp = [](const Tensor& x, const std::vector<Tensor>& w) {
    Tensor h = lt::relu(lt::matmul(x, w[0]));
    h = lt::gelu(lt::matmul(h, w[1]));
    return lt::matmul(h, w[2]);
  };
  auto pure_mlp = lt::assume_pure(mlp);
  expect_same_grads(
      [&](const auto& x) {
        return mlp(x[0], {x[1], x[2], x[3]});
      },
      [&](const auto& x) {
        return pure_mlp(x[0], std::vector<Tensor>{x[1], x[2], x[3]});
      },
      {random_tensor({4, 6}, 13), random_tensor({6, 8}, 14).requires_grad_(),
       random_tensor({8, 8}, 15).requires_grad_(), random_tensor({8, 3}, 16).requires_grad_()},
      "3-layer MLP");
}

// A function that passes one outer tensor to an inner assume_pure function which captures
// another: the forward trace lifted them in one order and the retrace for backward (the
// inner call a cache hit) in the other, and backward failed ("used different outside
// tensors ... (2 instead of 2)"; lt_fuzz seed 1037170). The retrace now lifts the first
// trace's tensors first, in its order. Gradients against the same code without assume_pure.
TEST(AssumePureGrad, NestedCallsLiftOuterTensorsInOneOrder) {
  Tensor a = lt::tensor({0.5, -1.5}).requires_grad_();
  Tensor c = lt::tensor({0.25, 2.0, 3.0}).requires_grad_();
  Tensor x = lt::tensor({1.5, -0.5}).requires_grad_();
  auto inner_fn = [&c](const Tensor& u, const Tensor& v) {
    return lt::sum(u * v) * lt::exp(c);  // c captured
  };
  auto outer_fn = [&a](const Tensor& p, const std::function<Tensor(Tensor, Tensor)>& inner) {
    return lt::tanh(inner(a, p)) + lt::sum(p);  // a passed on
  };
  auto inner = lt::assume_pure([&](const Tensor& u, const Tensor& v) { return inner_fn(u, v); });
  auto outer = lt::assume_pure([&](const Tensor& p) {
    return outer_fn(p, [&](Tensor u, Tensor v) { return inner(u, v); });
  });
  Tensor w = lt::tensor({1.0, -2.0, 0.5});
  for (int call = 0; call < 2; ++call) {  // the second: both functions cache hits
    auto got = lt::autograd::grad({lt::sum(outer(x) * w)}, {a, c, x});
    auto want = lt::autograd::grad({lt::sum(outer_fn(x, inner_fn) * w)}, {a, c, x});
    for (size_t k = 0; k < got.size(); ++k) {
      std::vector<double> g = got[k].to_vector<double>(), r = want[k].to_vector<double>();
      ASSERT_EQ(g.size(), r.size());
      for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], r[i], 1e-12) << call << " " << k;
    }
  }
}

TEST(AssumePureGrad, NoInputRequiringGradGivesAPlainOutput) {
  auto f = lt::assume_pure([](const Tensor& a) { return a * 2.0f; });
  Tensor y = f(random_tensor({3}, 17));
  EXPECT_FALSE(y.requires_grad());
  Tensor w = random_tensor({3}, 18).requires_grad_();
  EXPECT_TRUE(f(w).requires_grad());
}

TEST(AssumePureGrad, ClosedOverTensorsReceiveGradients) {
  Tensor w = random_tensor({4, 2}, 19).requires_grad_();
  auto f = lt::assume_pure([w](const Tensor& x) { return lt::tanh(lt::matmul(x, w)); });
  Tensor x = random_tensor({3, 4}, 20);
  lt::sum(f(x)).backward();
  Tensor g = w.grad();
  w.set_grad({});
  lt::sum(lt::tanh(lt::matmul(x, w))).backward();
  expect_close(g, w.grad(), 1e-5, "closure gradient");
}

TEST(AssumePureGrad, ADecoderWithAssumePurePerLayerTracesForwardAndBackwardOnce) {
  nn::DecoderConfig cfg{.vocab = 32,
                        .hidden = 16,
                        .intermediate = 24,
                        .heads = 4,
                        .kv_heads = 2,
                        .layers = 3,
                        .max_seq = 16};
  lt::manual_seed(3);
  auto model = std::make_shared<nn::DecoderLM>(cfg);
  auto layer0 = model->layers->at<nn::DecoderLayer>(0);
  // every layer has layer 0's structure: one traced function serves them all
  auto layer_fn = lt::assume_pure([layer0](const nn::ParamMap& p, const Tensor& h) {
    return nn::functional_call(*layer0, p, {}, h);
  });
  std::vector<nn::ParamMap> layer_params;
  for (const auto& layer : *model->layers) layer_params.push_back(layer->named_parameters());
  auto forward = [&](const Tensor& tokens, bool pure) {
    Tensor h = (*model->embed)(tokens);
    for (size_t i = 0; i < layer_params.size(); ++i)
      h = pure ? layer_fn(layer_params[i], h) : model->layers->at<nn::DecoderLayer>(i)->forward(h);
    return (*model->head)((*model->norm)(h));
  };
  lt::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  Tensor tokens = lt::tensor(std::vector<int64_t>{1, 5, 2, 7, 3, 3, 9, 4}, {2, 4});
  Tensor targets = lt::tensor(std::vector<int64_t>{5, 2, 7, 3, 3, 9, 4, 1}, {2, 4});
  // the gradients of one step, with and without assume_pure
  nn::cross_entropy(forward(tokens, false), targets).backward();
  std::vector<Tensor> plain_grads;
  for (const Tensor& p : model->parameters()) plain_grads.push_back(p.grad());
  model->zero_grad();
  lt::metrics::reset();
  nn::cross_entropy(forward(tokens, true), targets).backward();
  std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    expect_close(params[i].grad(), plain_grads[i], 1e-4, "parameter " + std::to_string(i));
  opt.step();
  opt.zero_grad();
  lt::sync();
  for (int step = 1; step < 5; ++step) {
    nn::cross_entropy(forward(tokens, true), targets).backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
  }
  EXPECT_EQ(counter("AssumePureTrace"), 1);
  EXPECT_EQ(counter("AssumePureBackwardTrace"), 1);
  EXPECT_EQ(counter("AssumePureHit"), 5 * 3 - 1);
}

// The VJP of a call recomputes the forward; inlined beside the forward call, the two merge
// (their constants are equal and share a slot): a training step with assume_pure per layer
// runs the products of the plain step, not more.
TEST(AssumePureGrad, TheVjpsRecomputedForwardMergesWithTheForward) {
  auto products = [](nn::LayersMode mode) {
    lt::manual_seed(4);
    nn::DecoderConfig cfg = tiny_decoder_config();
    auto model = std::make_shared<nn::DecoderLM>(cfg);
    model->layers_mode = mode;
    lt::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
    auto [tokens, targets] = tiny_batch();
    nn::cross_entropy((*model)(tokens), targets).backward();
    opt.step();
    const std::string program = lt::debug::to_program(model->parameters());
    opt.zero_grad();
    lt::sync();
    int n = 0;
    for (size_t at = program.find("] matmul "); at != std::string::npos;
         at = program.find("] matmul ", at + 1))
      ++n;
    return n;
  };
  const int plain = products(nn::LayersMode::loop);
  EXPECT_GT(plain, 0);
  EXPECT_EQ(products(nn::LayersMode::assume_pure), plain);
}

// ---- closures, randomness, purity

TEST(AssumePure, AClosedOverTensorUpdatedInPlaceIsSeenOnTheNextCall) {
  lt::metrics::reset();
  Tensor scale = lt::tensor({2.0f});
  auto f = lt::assume_pure([scale](const Tensor& x) { return x * scale; });
  Tensor x = lt::tensor({1.0f, 3.0f});
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{2, 6}));
  scale.copy_(lt::tensor({5.0f}));
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{5, 15}));
  scale.copy_(scale * 2.0f);  // pending: read lazily at the call
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{10, 30}));
  EXPECT_EQ(counter("AssumePureTrace"), 1);
}

TEST(AssumePure, RandomOpsDrawFreshNumbersOnEachCallWithoutRetracing) {
  lt::metrics::reset();
  auto noisy = lt::assume_pure([](const Tensor& x) { return x + lt::randn({4}); });
  Tensor x = lt::zeros({4});
  lt::manual_seed(7);
  std::vector<float> a = noisy(x).to_vector<float>();
  std::vector<float> b = noisy(x).to_vector<float>();
  EXPECT_NE(a, b);
  const int64_t compiles = counter("CompileCount");
  std::vector<float> c = noisy(x).to_vector<float>();
  EXPECT_EQ(counter("CompileCount"), compiles);  // same graph
  EXPECT_EQ(counter("AssumePureTrace"), 1);
  // the same draws as the plain function from the same seed
  lt::manual_seed(7);
  std::vector<float> plain = (x + lt::randn({4})).to_vector<float>();
  EXPECT_EQ(a, plain);
}

TEST(AssumePure, PurityCheckCatchesAGraphThatDependsOnAHostCounter) {
  int calls = 0;
  auto body = [&calls](const Tensor& x) {
    ++calls;
    return calls % 2 ? x + 1.0f : x * 2.0f;
  };
  Tensor x = lt::tensor({1.0f});
  auto unchecked = lt::assume_pure(body);
  unchecked(x);
  unchecked(x);                              // silently replays the first graph
  setenv("LAZYTRACE_CHECK_PURITY", "1", 1);  // read when a function is made
  auto checked = lt::assume_pure(body);
  unsetenv("LAZYTRACE_CHECK_PURITY");
  checked(x);
  expect_error([&] { checked(x); },
               {"[assume_pure]", "is not pure", "node %", "Make it depend only on its arguments"});
}

// A number that becomes 0, 1 or -1 (kept in the graph as a literal, where others are
// parameters): the first differing node is named.
TEST(AssumePure, PurityCheckNamesALiteralNumberThatChanged) {
  double scale = 2;
  setenv("LAZYTRACE_CHECK_PURITY", "1", 1);
  auto checked = lt::assume_pure([&scale](const Tensor& x) { return x * scale + 3.0; });
  unsetenv("LAZYTRACE_CHECK_PURITY");
  Tensor x = lt::tensor({1.0f});
  EXPECT_EQ(checked(x).item<float>(), 5.0f);
  scale = 1;
  expect_error([&] { checked(x); }, {"[assume_pure]", "is not pure", "node %",
                                     "is scalar f32[] = 1, was scalar f32[] (a parameter)"});
}

TEST(AssumePure, PurityCheckCatchesAHostNumberThatChanged) {
  double scale = 2;  // read by the function: the same graph with another number
  setenv("LAZYTRACE_CHECK_PURITY", "1", 1);
  auto checked = lt::assume_pure([&scale](const Tensor& x) { return x * scale; });
  unsetenv("LAZYTRACE_CHECK_PURITY");
  Tensor x = lt::tensor({1.0f});
  EXPECT_EQ(checked(x).item<float>(), 2.0f);
  EXPECT_EQ(checked(x).item<float>(), 2.0f);  // the same number: pure so far
  scale = 3;
  expect_error([&] { checked(x); }, {"[assume_pure]", "is not pure",
                                     "gave the number 3 where "
                                     "the first trace had 2",
                                     "lt::scalar(v)"});
}

TEST(AssumePure, PurityCheckCatchesHostDataThatChanged) {
  std::vector<float> v{1, 2};  // copied into a tensor by the function: the same graph
  setenv("LAZYTRACE_CHECK_PURITY", "1", 1);
  auto checked = lt::assume_pure([&v](const Tensor& x) { return x * lt::tensor(v, {2}); });
  unsetenv("LAZYTRACE_CHECK_PURITY");
  Tensor x = lt::tensor({3.0f, 3.0f});
  EXPECT_EQ(checked(x).to_vector<float>(), (std::vector<float>{3, 6}));
  EXPECT_EQ(checked(x).to_vector<float>(), (std::vector<float>{3, 6}));  // same values: pure
  v[0] = 7;
  expect_error([&] { checked(x); },
               {"[assume_pure]", "is not pure", "host data", "float32[2]", "tensor arguments"});
}

TEST(AssumePure, Errors) {
  Tensor outside = lt::tensor({1.0f, 2.0f});
  auto writes = lt::assume_pure([outside](const Tensor& x) {
    Tensor o = outside;
    o.copy_(x);
    return x;
  });
  expect_error(
      [&] {
        writes(lt::tensor({3.0f, 4.0f}));
      },
      {"[assume_pure]", "writes into a tensor from outside", "f32[2]"});
  auto reads = lt::assume_pure([](const Tensor& x) { return x * lt::sum(x).item<float>(); });
  expect_error([&] { reads(lt::tensor({3.0f})); },
               {"[assume_pure]", "inside a traced function", "item()"});
  auto syncs = lt::assume_pure([](const Tensor& x) {
    lt::sync();
    return x;
  });
  expect_error([&] { syncs(lt::tensor({3.0f})); },
               {"[assume_pure] sync() inside a traced function"});
  auto f = lt::assume_pure([](const Tensor& x) { return x; });
  expect_error([&] { f(Tensor()); }, {"[pytree]", "undefined"});
}

TEST(AssumePure, PytreesInAndOut) {
  lt::metrics::reset();
  auto f = lt::assume_pure([](const lt::Tree& t, const std::pair<Tensor, Tensor>& p) {
    Tensor s = t["a"].tensor() + t["b"][1].tensor();
    return std::tuple<Tensor, std::vector<Tensor>>{s * p.first, {p.second, s}};
  });
  lt::Tree tree = lt::Tree::dict(
      {{"b", lt::Tree::list({lt::tensor({9.0f}), lt::tensor({2.0f})})}, {"a", lt::tensor({1.0f})}});
  auto [x, v] = f(tree, std::pair{lt::tensor({4.0f}), lt::tensor({5.0f})});
  EXPECT_EQ(x.item<float>(), 12.0f);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].item<float>(), 5.0f);
  EXPECT_EQ(v[1].item<float>(), 3.0f);
  f(tree, std::pair{lt::tensor({4.0f}), lt::tensor({5.0f})});
  EXPECT_EQ(counter("AssumePureTrace"), 1);
}

TEST(AssumePure, CacheMissesAreExplainedWhenAsked) {
  setenv("LAZYTRACE_EXPLAIN_CACHE_MISSES", "1", 1);
  auto f =
      lt::assume_pure([](const Tensor& x, int k) { return x * static_cast<float>(k); }, "scale");
  testing::internal::CaptureStderr();
  f(lt::zeros({10}), 2);
  f(lt::zeros({5}), 2);
  f(lt::zeros({5}), 3);
  std::string err = testing::internal::GetCapturedStderr();
  unsetenv("LAZYTRACE_EXPLAIN_CACHE_MISSES");
  EXPECT_NE(
      err.find("[assume_pure] cache miss for 'scale': the function has not been traced before"),
      std::string::npos)
      << err;
  EXPECT_NE(err.find("got f32[5] at argument 0, expected f32[10]"), std::string::npos) << err;
  EXPECT_NE(err.find("got int 3 at argument 1, expected int 2"), std::string::npos) << err;
}

}  // namespace

namespace {

// The whole model under assume_pure, its weights closed over and updated by the optimizer
// every step: each step must see the new weights (the captured tensors' group is remade
// after writes) and train exactly like the plain model.
TEST(AssumePureGrad, WholeModelWithCapturedWeightsTrainsLikeThePlainModel) {
  const nn::DecoderConfig cfg = tiny_decoder_config();
  auto [tokens, targets] = tiny_batch();
  std::vector<std::vector<float>> losses(2);
  for (int pure = 0; pure < 2; ++pure) {
    lt::manual_seed(11);
    auto model = std::make_shared<nn::DecoderLM>(cfg);
    auto forward = lt::assume_pure([model](const Tensor& t) { return model->forward(t); });
    lt::optim::SGD opt(model->parameters(), {.lr = 0.5, .momentum = 0.9});
    lt::metrics::reset();
    for (int step = 0; step < 4; ++step) {
      Tensor logits = pure ? forward(tokens) : model->forward(tokens);
      Tensor loss = nn::cross_entropy(logits, targets);
      loss.backward();
      opt.step();
      opt.zero_grad();
      lt::sync();
      losses[static_cast<size_t>(pure)].push_back(loss.item<float>());
    }
    if (pure) {
      EXPECT_EQ(counter("AssumePureTrace"), 1);
      EXPECT_EQ(counter("AssumePureBackwardTrace"), 1);
    }
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5) << i;
  EXPECT_LT(losses[0].back(), losses[0].front());
}

}  // namespace

namespace {

TEST(AssumePure, TheTraceCacheIsBoundedLeastRecentlyUsedFirst) {
  setenv("LAZYTRACE_TRACE_CACHE_SIZE", "2", 1);  // read when the function is made
  auto f = lt::assume_pure([](const Tensor& x) { return x * 2.0f; });
  unsetenv("LAZYTRACE_TRACE_CACHE_SIZE");
  lt::metrics::reset();
  f(lt::zeros({1}));
  f(lt::zeros({2}));
  f(lt::zeros({1}));  // a hit; {1} is now the most recent
  f(lt::zeros({3}));  // evicts {2}
  EXPECT_EQ(counter("AssumePureTrace"), 3);
  f(lt::zeros({1}));  // still cached
  EXPECT_EQ(counter("AssumePureTrace"), 3);
  f(lt::zeros({2}));  // traced again
  EXPECT_EQ(counter("AssumePureTrace"), 4);
  EXPECT_EQ(counter("AssumePureHit"), 2);
  EXPECT_EQ(f(lt::tensor({1.0f, 2.0f})).to_vector<float>(), (std::vector<float>{2, 4}));
}

}  // namespace

namespace {

// Calls that are not differentiated are compiled once per body: the program has one call
// step per call, running one shared body program, nested calls included.
TEST(AssumePure, CallsAreCompiledOncePerBodyAndGiveThePlainValues) {
  auto inner_fn = [](const Tensor& h, const Tensor& w) { return lt::tanh(lt::matmul(h, w)) + h; };
  auto inner = lt::assume_pure(inner_fn);
  auto outer = lt::assume_pure([inner](const Tensor& h, const Tensor& w) {
    return lt::sigmoid(inner(inner(h, w), w)) * 2.0f;
  });
  std::vector<Tensor> ws;
  for (int i = 0; i < 6; ++i) ws.push_back(random_tensor({8, 8}, 30 + static_cast<uint64_t>(i)));
  Tensor x = random_tensor({4, 8}, 40);
  Tensor h = x, ref = x;
  for (const Tensor& w : ws) {
    h = outer(h, w);
    ref = lt::sigmoid(inner_fn(inner_fn(ref, w), w)) * 2.0f;
  }
  const std::string plan = lt::debug::to_program({h});
  size_t calls = 0;  // the outer calls, at the program's top level (bodies are indented)
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);)
    calls += line.rfind("  [", 0) == 0 && line.find("] call (") != std::string::npos;
  EXPECT_EQ(calls, 6u) << plan;  // the inner ones run inside its program
  expect_close(h, ref, 1e-5, "outlined calls");
  // a differentiated call is inlined: its VJP's forward merges with it
  Tensor w = random_tensor({8, 8}, 41).requires_grad_();
  Tensor y = outer(x, w);
  EXPECT_EQ(lt::debug::to_program({y}).find("] call ("), std::string::npos);
}

// CacheOptions::trace_once (what the Python package uses): the function runs once per
// signature, its VJP traced from the same run; the gradient equals the separately traced one.
TEST(AssumePure, TraceOnceRunsTheFunctionOnceBackwardIncluded) {
  int runs = 0;
  auto fn = [&runs](const Tensor& a, const Tensor& b) {
    ++runs;
    Tensor h = a * 1.0f;
    h.copy_(h + b);  // in place, under autograd
    return lt::tanh(h * b) + lt::sin(b);
  };
  auto cache = lt::tools::make_function_cache({.tool = "assume_pure", .trace_once = true});
  Tensor a = random_tensor({3, 2}, 50).requires_grad_();
  Tensor b = random_tensor({3, 2}, 51).requires_grad_();
  for (int i = 0; i < 3; ++i) {
    Tensor y = lt::tools::call_cached(fn, *cache, a, b);
    lt::sum(y * y).backward();
  }
  EXPECT_EQ(runs, 1);
  // the reference: the same function with no tool, three backwards accumulated
  Tensor a2 = a.detach().requires_grad_(), b2 = b.detach().requires_grad_();
  for (int i = 0; i < 3; ++i) {
    Tensor h = a2 + b2;
    Tensor y = lt::tanh(h * b2) + lt::sin(b2);
    lt::sum(y * y).backward();
  }
  expect_close(a.grad(), a2.grad(), 1e-5, "d/da");
  expect_close(b.grad(), b2.grad(), 1e-5, "d/db");
}

// The backward of a call reads what the call read: a tensor given a new value after the
// call (an optimizer step, a closed-over weight) does not change the call's gradient.
TEST(AssumePure, BackwardReadsTheValuesTheCallHad) {
  Tensor w = lt::tensor({3.0f, 4.0f}).requires_grad_();
  Tensor x = lt::tensor({1.0f, 2.0f}).requires_grad_();
  auto f = lt::assume_pure([&w](const Tensor& a) { return a * a * w; });
  Tensor y = lt::sum(f(x));
  {
    lt::NoGradGuard no_grad;
    x.copy_(lt::tensor({10.0f, 20.0f}));
    w.copy_(lt::tensor({30.0f, 40.0f}));
  }
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{6, 16}));  // 2 x w at the call
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 4}));   // x^2 at the call
}

// Calls with the same weights share one list of tape edges; every change of what the
// edges would be (another tensor, requires_grad turned off, a computed input) makes new
// ones. Each case against the plain function's gradients.
TEST(AssumePureGrad, CallsWithTheSameWeightsShareEdgesOnlyWhileTheyAreTheSame) {
  Tensor w = random_tensor({4, 2}, 31).requires_grad_();
  Tensor v = random_tensor({4, 2}, 32).requires_grad_();
  Tensor x = random_tensor({3, 4}, 33);
  auto f =
      lt::assume_pure([](const Tensor& a, const Tensor& m) { return lt::tanh(lt::matmul(a, m)); });
  auto g = [](const Tensor& a, const Tensor& m) { return lt::tanh(lt::matmul(a, m)); };
  auto reference = [&](const Tensor& m, const std::vector<Tensor>& xs) {
    Tensor r = m.detach().requires_grad_();
    for (const Tensor& a : xs) lt::sum(g(a, r) * g(a, r)).backward();
    return r.grad();
  };
  Tensor x2 = random_tensor({3, 4}, 34);
  // two calls with w: the second shares the first's edges; both gradients arrive
  Tensor l1 = lt::sum(f(x, w) * f(x, w)) + lt::sum(f(x2, w) * f(x2, w));
  l1.backward();
  expect_close(w.grad(), reference(w, {x, x, x2, x2}) * 0.5, 1e-5, "same weights, shared");
  // another weight of the same type: its own edges
  w.set_grad({});
  lt::sum(f(x, v) * f(x, v)).backward();
  expect_close(v.grad(), reference(v, {x}), 1e-5, "another weight");
  EXPECT_FALSE(w.grad().defined());
  // w no longer requires grad: the call must not send it one through old edges
  w.requires_grad_(false);
  Tensor y = f(x, w);
  EXPECT_FALSE(y.requires_grad());
  w.requires_grad_(true);
  lt::sum(f(x, w) * f(x, w)).backward();
  expect_close(w.grad(), reference(w, {x}), 1e-5, "requires_grad again");
  // with another input still requiring grad, the call stays differentiated: a weight that
  // stopped requiring grad must get nothing through the edges of the call before
  Tensor xg = x.detach().requires_grad_();
  w.set_grad({});
  lt::sum(f(xg, w)).backward();
  Tensor gw = w.grad();
  w.requires_grad_(false);
  lt::sum(f(xg, w)).backward();
  expect_close(w.grad(), gw, 0, "no gradient to a weight that stopped requiring grad");
  Tensor rx = x.detach().requires_grad_();
  lt::sum(g(rx, w)).backward();
  lt::sum(g(rx, w)).backward();
  expect_close(xg.grad(), rx.grad(), 1e-5, "the other input, twice");
  w.requires_grad_(true);
  // a computed input (not a leaf): its gradient flows on to the leaf behind it
  w.set_grad({});
  Tensor w2 = w * 2.0f;
  lt::sum(f(x, w2) * f(x, w2)).backward();
  Tensor r = w.detach().requires_grad_();
  lt::sum(g(x, r * 2.0f) * g(x, r * 2.0f)).backward();
  expect_close(w.grad(), r.grad(), 1e-5, "computed input");
}

// The same with 20 weights in a list, whose tape state the flattening reads once (from the
// 16th leaf on) and the shared edges are checked against: each change of a weight's state
// between calls, against the plain function's gradients.
TEST(AssumePureGrad, ManyWeightsShareEdgesOnlyWhileEachIsTheSame) {
  auto plain = [](const std::vector<Tensor>& ws, const Tensor& x) {
    Tensor h = x;
    for (const Tensor& w : ws) h = lt::tanh(h * w);
    return lt::sum(h * h);
  };
  auto f = lt::assume_pure(plain);
  std::vector<Tensor> ws;
  for (uint64_t i = 0; i < 20; ++i) ws.push_back(random_tensor({4}, 300 + i).requires_grad_());
  const Tensor x = random_tensor({4}, 299);
  // the gradients the plain function gives leaves with ws' values, for those that require grad
  auto expect_plain_grads = [&](const std::vector<Tensor>& args, const char* what) {
    for (Tensor& w : ws) w.set_grad({});
    lt::sum(f(args, x)).backward();
    std::vector<Tensor> r;
    for (const Tensor& t : args) {
      Tensor d = t.detach();
      r.push_back(t.requires_grad() ? d.requires_grad_() : d);
    }
    plain(r, x).backward();
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_leaf() || !args[i].requires_grad()) continue;
      expect_close(args[i].grad(), r[i].grad(), 1e-5,
                   std::string(what) + ", gradient " + std::to_string(i));
    }
  };
  expect_plain_grads(ws, "first call");
  expect_plain_grads(ws, "the same weights: shared edges");
  ws[5].requires_grad_(false);
  for (Tensor& w : ws) w.set_grad({});
  lt::sum(f(ws, x)).backward();
  EXPECT_FALSE(ws[5].grad().defined()) << "a weight that stopped requiring grad";
  expect_plain_grads(ws, "one weight without grad");
  ws[5].requires_grad_(true);
  expect_plain_grads(ws, "requires grad again");
  // a computed weight (not a leaf): its gradient goes on to the leaf behind it
  std::vector<Tensor> computed = ws;
  computed[3] = ws[3] * 2.0f;
  for (Tensor& w : ws) w.set_grad({});
  lt::sum(f(computed, x)).backward();
  Tensor r3 = ws[3].detach().requires_grad_();
  std::vector<Tensor> ref;
  for (const Tensor& t : ws) ref.push_back(t.detach());
  ref[3] = r3 * 2.0f;
  plain(ref, x).backward();
  expect_close(ws[3].grad(), r3.grad(), 1e-5, "computed weight");
  // another leaf in one place: its own edge
  std::vector<Tensor> other = ws;
  other[11] = random_tensor({4}, 400).requires_grad_();
  expect_plain_grads(other, "one weight replaced");
  EXPECT_FALSE(ws[11].grad().defined());
}

// An argument with many leaves (a model's weights) travels in the call's Pack, reused while
// its tensors keep their values: each case against the plain function, values and
// gradients, and the Pack remade exactly when something in it changed.
TEST(AssumePureGrad, ManyWeightsInAReusedPackSeeEveryChange) {
  auto plain = [](const std::vector<Tensor>& ws, const Tensor& x) {
    Tensor h = x;
    for (size_t i = 0; i < ws.size(); ++i) h = lt::tanh(h * ws[i] + static_cast<float>(i));
    return h;
  };
  auto f = lt::assume_pure(plain);
  std::vector<Tensor> ws, vs;
  for (uint64_t i = 0; i < 20; ++i) {
    ws.push_back(random_tensor({4}, 100 + i).requires_grad_());
    vs.push_back(random_tensor({4}, 200 + i).requires_grad_());
  }
  Tensor x = random_tensor({4}, 99);
  auto expect_plain = [&](const std::vector<Tensor>& w, const Tensor& a, const char* what) {
    Tensor y = f(w, a);
    std::vector<Tensor> r;
    for (const Tensor& t : w) r.push_back(t.detach().requires_grad_());
    Tensor ref = plain(r, a);
    expect_close(y, ref, 1e-6, what);
    lt::sum(y * y).backward();
    lt::sum(ref * ref).backward();
    for (size_t i = 0; i < w.size(); ++i) {
      expect_close(w[i].grad(), r[i].grad(), 1e-5,
                   std::string(what) + ", gradient " + std::to_string(i));
      Tensor(w[i]).set_grad({});
    }
  };
  lt::metrics::reset();
  expect_plain(ws, x, "first call");
  const int64_t built = counter("CallPackBuilt");
  EXPECT_EQ(built, 1);
  expect_plain(ws, random_tensor({4}, 98), "the same weights, another input");
  EXPECT_EQ(counter("CallPackBuilt"), built);  // reused: nothing in it changed
  expect_plain(vs, x, "other weights of the same shapes");
  EXPECT_EQ(counter("CallPackBuilt"), built + 1);
  expect_plain(ws, x, "the first weights again");
  EXPECT_EQ(counter("CallPackBuilt"), built + 2);
  {
    lt::NoGradGuard no_grad;
    ws[7].copy_(ws[7] * 3.0f);  // pending, in place: the tensor has a new value
  }
  expect_plain(ws, x, "a weight written in place");
  EXPECT_EQ(counter("CallPackBuilt"), built + 3);
  std::vector<Tensor> mixed = ws;
  mixed[19] = vs[19];
  expect_plain(mixed, x, "one weight replaced");
  lt::sync();
  expect_plain(mixed, x, "after a sync (the same tensors, now materialized)");
  EXPECT_EQ(counter("AssumePureTrace"), 1);
  // inside another trace, the outer weights are lifted into it and packed there
  auto outer = lt::assume_pure([&](const Tensor& a) { return f(ws, a) * 2.0f; });
  Tensor y = outer(x);
  std::vector<Tensor> r;
  for (const Tensor& t : ws) r.push_back(t.detach());
  expect_close(y, plain(r, x) * 2.0f, 1e-6, "nested");
  // with the pass off (at trace time) the weights are direct operands: no Pack is made
  lt::debug::set_disabled_passes({"pack_arguments"});
  auto direct = lt::assume_pure(plain);
  lt::metrics::reset();
  expect_close(direct(ws, x), plain(r, x), 1e-6, "pass off");
  EXPECT_EQ(counter("CallPackBuilt"), 0);
  lt::debug::set_disabled_passes({});
}

// A write into an argument (copy_, an in-place op): assume_pure takes its arguments by
// value, so the write changes the function's copy only; compile writes it back into the
// caller's tensor after each call, as running the same code eagerly does.
TEST(AssumePure, WritesIntoArgumentsAreRefusedAndCompileWritesThemBack) {
  auto writes = [](const Tensor& a) {
    Tensor b = a;
    b.copy_(a * 3);
    return b + 1;
  };
  Tensor eager = lt::tensor({5.0f});
  EXPECT_EQ(writes(eager).item<float>(), 16.0f);
  EXPECT_EQ(eager.item<float>(), 15.0f);
  auto pure = lt::assume_pure(writes);  // the caller's tensor would not see the write
  Tensor arg = lt::tensor({5.0f});
  expect_error([&] { (void)pure(arg); },
               {"[assume_pure]", "writes in place into its tensor argument 0", "f32[1]"});
  EXPECT_EQ(arg.item<float>(), 5.0f);
  auto compiled = lt::compile(writes, {.name = "writes_arg"});
  for (float v : {5.0f, 2.0f}) {
    Tensor x = lt::tensor({v});
    EXPECT_EQ(compiled(x).item<float>(), 3 * v + 1);
    EXPECT_EQ(x.item<float>(), 3 * v);
  }
  EXPECT_EQ(lt::metrics::counter("CompileCount[writes_arg]"), 1);
}

// Second-order gradients through a call are an error, not a silent zero: the call's
// gradient runs a traced VJP body that records no gradient of its own. d/dr (3 r^2) = 6r.
TEST(AssumePureGrad, HigherOrderGradientsThroughACallAreAnError) {
  auto cube = lt::assume_pure([](const Tensor& a) { return a * a * a; });
  Tensor r = lt::tensor({2.0}).requires_grad_();
  expect_error([&] { lt::autograd::grad({lt::sum(cube(r))}, {r}, {}, {.create_graph = true}); },
               {"[assume_pure]", "higher-order gradients (create_graph)", "not supported"});
  // first order still works: 3 r^2 = 12
  EXPECT_DOUBLE_EQ(lt::autograd::grad({lt::sum(cube(r))}, {r})[0].item<double>(), 12.0);
  // and the plain ops give the second order: 6 r = 12
  auto g1 = lt::autograd::grad({lt::sum(r * r * r)}, {r}, {}, {.create_graph = true});
  EXPECT_DOUBLE_EQ(lt::autograd::grad({lt::sum(g1[0])}, {r})[0].item<double>(), 12.0);
}

// What the API promises compiles as written: a string literal as a static argument (one
// trace per distinct string, as with std::string), functional_call on a plain shared_ptr,
// and scan_layers over a model's ModuleList member, which equals the loop over its layers.
TEST(AssumePure, StringLiteralsSharedPtrsAndModuleListsAreAcceptedAsWritten) {
  int traces = 0;
  auto pick = [&traces](const Tensor& x, const std::string& op) {
    ++traces;
    return op == "exp" ? lt::exp(x) : x * 2.0f;
  };
  auto pure = lt::assume_pure(pick);
  auto compiled = lt::compile(pick, {.name = "pick"});
  EXPECT_FLOAT_EQ(pure(lt::zeros({1}), "exp").item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(pure(lt::ones({1}), "exp").item<float>(), std::exp(1.0f));
  EXPECT_FLOAT_EQ(pure(lt::ones({1}), "twice").item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(compiled(lt::ones({1}), "twice").item<float>(), 2.0f);
  EXPECT_EQ(traces, 3);

  auto ln = std::make_shared<lt::nn::LayerNorm>(4);
  lt::nn::ParamMap params = ln->named_parameters();
  params["weight"] = lt::full({4}, 2.0f);
  const Tensor y = lt::nn::functional_call(
      ln, params, {}, lt::reshape(lt::tensor({1.0f, 2.0f, 3.0f, 4.0f}), {1, 4}));
  const Tensor ref = lt::nn::functional_call(
      *ln, params, {}, lt::reshape(lt::tensor({1.0f, 2.0f, 3.0f, 4.0f}), {1, 4}));
  EXPECT_EQ(y.to_vector<float>(), ref.to_vector<float>());
  EXPECT_NEAR(y.to_vector<float>()[3], 2.0f * 1.5f / std::sqrt(1.25f + 1e-5f), 1e-5);

  auto model = std::make_shared<lt::nn::DecoderLM>(tiny_decoder_config());
  const Tensor h = random_tensor({1, 4, tiny_decoder_config().hidden}, 60);
  Tensor loop = h;
  for (size_t i = 0; i < model->layers->size(); ++i)
    loop = (*model->layers->at<lt::nn::DecoderLayer>(i))(loop);
  expect_close(lt::nn::scan_layers<lt::nn::DecoderLayer>(model->layers, h), loop, 1e-5,
               "scan_layers over the ModuleList");
}

}  // namespace

// backward() inside a pure function would write the .grad of a tensor from outside it:
// an error naming the tool (it was silently dropped in Python, where the trace records
// gradients).
TEST(AssumePure, BackwardInsideIsAnError) {
  Tensor w = lt::ones({2}).requires_grad_();
  auto step = lt::assume_pure([&](const Tensor& x) {
    lt::sum(w * x).backward();
    return x * 1.0f;
  });
  expect_error(
      [&] {
        step(lt::tensor({3.0f, 4.0f}));
      },
      {"[assume_pure] backward() inside the traced function"});
  EXPECT_FALSE(w.grad().defined());
}
