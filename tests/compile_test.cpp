// compile: one graph per call, traced once per signature, named in metrics, and the
// full_graph and max_different_graphs guards with their messages.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "expect_error.h"
#include "tiny_decoder.h"

namespace {

using lt::Tensor;

int64_t counter(const std::string& name) {
  return lt::metrics::counter(name);
}

TEST(Compile, OneGraphRunPerCallTracedOncePerSignature) {
  auto plain = [](const Tensor& x, const Tensor& w) {
    return std::pair{lt::softmax(lt::matmul(x, w), -1), lt::sum(x)};
  };
  auto step = lt::compile(plain, {.name = "step"});
  Tensor w = lt::randn({4, 3});
  lt::sync();
  lt::metrics::reset();
  for (int i = 0; i < 10; ++i) {
    Tensor x = lt::randn({2, 4});  // pending: synced before the call, in its own graph
    const int64_t before = counter("ExecuteCount");
    auto [p, s] = step(x, w);
    EXPECT_FALSE(p.is_pending());                    // results come back materialized
    EXPECT_EQ(counter("ExecuteCount") - before, 2);  // the pending input, then the step
    auto [pp, ps] = plain(x, w);
    std::vector<float> a = p.to_vector<float>(), b = pp.to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-6);
    EXPECT_NEAR(s.item<float>(), ps.item<float>(), 1e-5);
  }
  EXPECT_EQ(counter("CompiledFnTrace"), 1);
  EXPECT_EQ(counter("CompiledFnHit"), 9);
  EXPECT_EQ(counter("ExecuteCount[step]"), 10);
  EXPECT_EQ(counter("CompileCount[step]"), 1);
  EXPECT_EQ(counter("ExecuteCount[step_clear_pending]"), 10);
  // nothing pending: a call is exactly one graph run
  Tensor x = lt::randn({2, 4});
  lt::sync();
  const int64_t before = counter("ExecuteCount");
  step(x, w);
  EXPECT_EQ(counter("ExecuteCount") - before, 1);
}

// What a step writes (an optimizer's update) is computed at its call, under its name: its
// writes are not left for the next call's "_clear_pending" graph.
TEST(Compile, WritesRunAtTheCallUnderTheStepsName) {
  Tensor w = lt::tensor({1.0f, -2.0f});
  auto update = lt::compile(
      [&](const Tensor& x) {
        w.copy_(w * 0.5f);
        return x + 1.0f;
      },
      {.name = "writes_only"});
  const Tensor x = lt::tensor({0.0f});
  lt::sync();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(update(x).item<float>(), 1.0f);
    EXPECT_FALSE(w.is_pending()) << i;
  }
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.125f, -0.25f}));
  EXPECT_EQ(counter("ExecuteCount[writes_only]"), 3);
  EXPECT_EQ(counter("ExecuteCount[writes_only_clear_pending]"), 0);
}

TEST(Compile, FullGraphRejectsReadsInsideTheFunction) {
  auto reads = [](const Tensor& x) { return x * lt::sum(x).item<float>(); };
  auto strict = lt::compile(reads, {.full_graph = true, .name = "strict"});
  expect_error(
      [&] {
        strict(lt::tensor({1.0f, 2.0f}));
      },
      {"[compile] unexpected execution inside the compiled function 'strict'", "full_graph",
       "item()"});
  // without full_graph the same function runs as plain code, reads and all
  auto relaxed = lt::compile(reads, {.name = "relaxed"});
  EXPECT_EQ(relaxed(lt::tensor({1.0f, 2.0f})).to_vector<float>(), (std::vector<float>{3, 6}));
  EXPECT_EQ(relaxed(lt::tensor({2.0f, 2.0f})).to_vector<float>(), (std::vector<float>{8, 8}));
  auto branches = lt::compile([](const Tensor& x) { return (lt::sum(x) > 0.0f) ? x : -x; },
                              {.full_graph = true});
  expect_error([&] { branches(lt::tensor({1.0f})); }, {"[compile] unexpected execution"});
}

TEST(Compile, MaxDifferentGraphsSaysWhatDiffered) {
  auto f =
      lt::compile([](const Tensor& x,
                     const std::string& act) { return act == "relu" ? lt::relu(x) : lt::tanh(x); },
                  {.name = "act", .max_different_graphs = 1});
  f(lt::zeros({10}), std::string("relu"));
  f(lt::ones({10}), std::string("relu"));  // same signature: fine
  expect_error([&] { f(lt::zeros({5}), std::string("relu")); },
               {"[compile] 'act' would produce graph 2 but max_different_graphs is 1",
                "got f32[5] at argument 0, expected f32[10]"});
  expect_error([&] { f(lt::zeros({10}), std::string("tanh")); },
               {"got string 'tanh' at argument 1, expected string 'relu'"});
}

}  // namespace

namespace {

TEST(Compile, GraphCacheMissesAreExplainedWhenAsked) {
  setenv("LAZYTRACE_EXPLAIN_CACHE_MISSES", "1", 1);
  testing::internal::CaptureStderr();
  Tensor a = lt::tensor({1.0f, 2.0f});
  (void)(lt::exp(a) * 3.0f).to_vector<float>();
  (void)(lt::exp(a) * 3.0f).to_vector<float>();  // a hit: nothing printed
  (void)(lt::exp(lt::tensor({1.0f, 2.0f, 3.0f})) * 3.0f).to_vector<float>();
  std::string err = testing::internal::GetCapturedStderr();
  unsetenv("LAZYTRACE_EXPLAIN_CACHE_MISSES");
  EXPECT_NE(err.find("[compile cache] miss for graph"), std::string::npos) << err;
  EXPECT_NE(err.find("no graph was compiled before"), std::string::npos) << err;
  EXPECT_NE(err.find("is data f32[3], the closest compiled graph has data f32[2] there"),
            std::string::npos)
      << err;
  size_t misses = 0;
  for (size_t p = err.find("miss for"); p != std::string::npos; p = err.find("miss for", p + 1))
    ++misses;
  EXPECT_EQ(misses, 2u);
}

}  // namespace

namespace {

// A whole training step (forward, backward, AdamW update, zero_grad) compiled: one graph
// per call, traced once, the optimizer's writes copied back, and the same losses and
// weights as the plain loop.
TEST(Compile, AWholeTrainingStepTrainsLikePlainCode) {
  const lt::nn::DecoderConfig cfg = tiny_decoder_config();
  auto [x, y] = tiny_batch();
  std::vector<std::vector<float>> losses(2), weights(2);
  for (int compiled = 0; compiled < 2; ++compiled) {
    lt::manual_seed(5);
    auto model = std::make_shared<lt::nn::DecoderLM>(cfg);
    lt::optim::AdamW opt(model->parameters(), {.lr = 0.05});
    auto train_step = [&](const Tensor& tokens, const Tensor& targets) {
      Tensor loss = lt::nn::cross_entropy((*model)(tokens), targets);
      loss.backward();
      opt.step();
      opt.zero_grad();
      return loss;
    };
    auto step = lt::compile(train_step, {.full_graph = true, .name = "train"});
    lt::metrics::reset();
    for (int i = 0; i < 5; ++i) {
      if (i == 3) opt.set_lr(0.02);  // a schedule: read by the compiled step, no retrace
      Tensor loss;
      if (compiled) {
        loss = step(x, y);
      } else {
        loss = train_step(x, y);
        lt::sync();
      }
      losses[static_cast<size_t>(compiled)].push_back(loss.item<float>());
    }
    weights[static_cast<size_t>(compiled)] = model->head->weight.to_vector<float>();
    if (compiled) {
      EXPECT_EQ(counter("CompiledFnTrace"), 1);
      EXPECT_EQ(counter("ExecuteCount[train]"), 5);
      EXPECT_EQ(counter("CompileCount[train]"), 1);
    }
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5) << i;
  for (size_t i = 0; i < weights[0].size(); ++i)
    EXPECT_NEAR(weights[1][i], weights[0][i], 1e-5) << i;
  EXPECT_LT(losses[0].back(), losses[0].front());
}

}  // namespace

namespace {

// A compiled step that updates one of two parameters: the updated one's count grows on
// every call (the bias correction of steps 1, 2, 3), the other's stays at 0, so its first
// update after them, made outside the compiled step, is the first of its own.
TEST(Compile, AdamWCountsEachParametersUpdatesAcrossCompiledCalls) {
  Tensor a = lt::tensor({1.0, -2.0}).requires_grad_(), b = lt::tensor({0.5}).requires_grad_();
  lt::optim::AdamW opt({a, b}, {.lr = 0.1, .weight_decay = 0});
  auto step = lt::compile(
      [&]() {
        Tensor loss = lt::sum(a * a);
        loss.backward();
        opt.step();
        opt.zero_grad();
        return loss;
      },
      {.name = "only_a"});
  double ra[2] = {1.0, -2.0}, ma[2] = {0, 0}, va[2] = {0, 0};
  for (int t = 1; t <= 3; ++t) {
    step();
    for (int i = 0; i < 2; ++i) {
      const double g = 2 * ra[i];
      ma[i] = 0.9 * ma[i] + 0.1 * g;
      va[i] = 0.999 * va[i] + 0.001 * g * g;
      ra[i] -= 0.1 * (ma[i] / (1 - std::pow(0.9, t))) /
               (std::sqrt(va[i] / (1 - std::pow(0.999, t))) + 1e-8);
    }
  }
  const std::vector<double> got = a.to_vector<double>();
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(got[i], ra[i], 1e-12) << i;
  EXPECT_EQ(counter("CompileCount[only_a]"), 1);
  lt::sum(lt::tanh(b)).backward();
  opt.step();
  // b's first update: m̂ = g, v̂ = g², so b moves by lr * g / (|g| + eps) = lr
  EXPECT_NEAR(b.to_vector<double>()[0], 0.5 - 0.1 / (1 + 1e-8 / (1 - std::pow(std::tanh(0.5), 2))),
              1e-12);
}

// Gradients computed inside a compiled function stay on the parameters' stand-ins: one that
// runs backward() and leaves them unused is an error naming the way out, not a function
// whose grad() silently never changes; returning them, or using them in an update, is fine.
TEST(Compile, GradientsComputedAndDiscardedInsideAreAnError) {
  Tensor w = lt::ones({2}).requires_grad_();
  auto backward_only = lt::compile(
      [&](const Tensor& x) {
        lt::sum(w * x).backward();
        return x;
      },
      {.name = "backward_only"});
  expect_error([&] { backward_only(lt::full({2}, 3.0f)); },
               {"[compile] 'backward_only' runs backward()", "1 tensor(s)", "f32[2]",
                "optimizer step inside", "return the gradients"});
  EXPECT_FALSE(w.grad().defined());
  auto returns_grad = lt::compile(
      [&](const Tensor& x) {
        lt::sum(w * x).backward();
        return w.grad();
      },
      {.name = "returns_grad"});
  EXPECT_EQ(returns_grad(lt::full({2}, 3.0f)).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(returns_grad(lt::full({2}, 5.0f)).to_vector<float>(), (std::vector<float>{5, 5}));
}

// A backward inside starts from no gradient, where eager code adds to the grad() a tensor
// already has: a call where that would differ is an error, not a different gradient; a
// function that clears the gradient itself first runs as eager code would.
TEST(Compile, BackwardOntoAGradSetOutsideIsRefused) {
  Tensor w = lt::ones({2}).requires_grad_();
  auto grad_of_w = lt::compile(
      [&](const Tensor& x) {
        lt::sum(w * x).backward();
        return w.grad();
      },
      {.name = "grad_of_w"});
  EXPECT_EQ(grad_of_w(lt::full({2}, 3.0f)).to_vector<float>(), (std::vector<float>{3, 3}));
  lt::sum(w * 2.0f).backward();  // eager: w.grad() is 2
  expect_error([&] { grad_of_w(lt::full({2}, 3.0f)); },
               {"[compile] 'grad_of_w' runs backward() into a f32[2] tensor",
                "already set outside it", "Clear the gradients before the call"});
  lt::optim::SGD opt({w}, {.lr = 0.5});
  auto step = lt::compile(
      [&](const Tensor& x) {
        opt.zero_grad();
        lt::sum(w * x).backward();
        opt.step();
        return x;
      },
      {.name = "clears_first"});
  step(lt::full({2}, 3.0f));  // w.grad() from outside is cleared inside: no error
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{-0.5f, -0.5f}));
}

// A function traced once has its train()/eval() mode built in (dropout on or off): every
// cache keys its traces also on the modes its function read, and traces again when one
// flips. Dropout(0.5) over 2000 ones zeroes about half of them in training, none in eval.
TEST(Compile, TracedFunctionsFollowTrainAndEval) {
  auto drop = std::make_shared<lt::nn::Dropout>(0.5);
  const Tensor x = lt::ones({2000});
  auto zeroed = [](const Tensor& y) {
    const std::vector<float> v = y.to_vector<float>();
    return static_cast<double>(std::count(v.begin(), v.end(), 0.0f)) /
           static_cast<double>(v.size());
  };
  auto pure = lt::assume_pure([drop](const Tensor& t) { return (*drop)(t); });
  auto compiled = lt::compile([drop](const Tensor& t) { return (*drop)(t); }, {.name = "modes"});
  auto pure_scan = [drop](const Tensor& t) {
    auto [c, ys] = lt::scan(
        [drop](const Tensor& c, const Tensor& row) {
          return std::pair{c, (*drop)(row)};
        },
        lt::zeros({1}), lt::reshape(t, {2, -1}), {.is_fn_pure = true});
    return lt::reshape(ys, {-1});
  };
  std::vector<std::shared_ptr<lt::nn::Dropout>> layers{drop,
                                                       std::make_shared<lt::nn::Dropout>(0.5)};
  auto stacked = [&](const Tensor& t) {
    return lt::nn::scan_layers(layers, t, {.is_layer_pure = true});
  };
  // a compiled function whose assume_pure was traced before it: a hit inside its trace
  auto outer =
      lt::compile([&](const Tensor& t) { return pure(t) + 0.0f; }, {.name = "modes_outer"});
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> tools = {
      {"assume_pure", pure},
      {"compile", compiled},
      {"scan", pure_scan},
      {"scan_layers", stacked},
      {"compile over assume_pure", outer}};
  for (const auto& [name, f] : tools)
    for (bool training : {true, false, true, false}) {
      for (auto& l : layers) l->train(training);
      const double z = zeroed(f(x));
      if (training)
        EXPECT_GT(z, 0.4) << name;
      else
        EXPECT_EQ(z, 0.0) << name;
    }
  EXPECT_EQ(counter("CompileCount[modes]"), 2) << "one trace per mode, each reused";
}

}  // namespace
