// nn: the module registry and functional_call, each layer against a float64 reference
// written with plain ops here (outputs and every parameter gradient), losses and
// optimizers against plain C++ loops, and a decoder trained on the GPL-3 text.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>

#include "expect_error.h"

namespace {

using lt::Tensor;
namespace nn = lt::nn;

Tensor f64(const Tensor& t) {
  return lt::astype(t.detach(), lt::float64);
}

void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i])) && bad++ < 3)
      ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", want " << w[i];
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}

Tensor random_tensor(const lt::Shape& shape, uint64_t seed, double scale = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, scale);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = static_cast<float>(n(rng));
  return lt::tensor(v, shape);
}

// Runs `module_fn` (float32 module) and `reference` (float64 plain ops over float64 copies
// of the parameters) on the same input, and compares the outputs and the gradients of
// sum(out * r) for every parameter and the input.
void compare_with_reference(
    nn::Module& module, const Tensor& x, const std::function<Tensor(const Tensor&)>& module_fn,
    const std::function<Tensor(const Tensor&, const nn::ParamMap&)>& reference, double tol) {
  Tensor x32 = x.detach().requires_grad_();
  Tensor out = module_fn(x32);
  Tensor r = random_tensor(out.shape(), 99);
  lt::sum(out * r).backward();

  nn::ParamMap p64;
  for (const auto& [name, p] : module.named_parameters()) p64.insert(name, f64(p).requires_grad_());
  Tensor x64 = f64(x).requires_grad_();
  Tensor ref = reference(x64, p64);
  lt::sum(ref * f64(r)).backward();

  expect_close(out, ref, tol, tol, "output");
  expect_close(x32.grad(), x64.grad(), tol, tol, "input gradient");
  for (const auto& [name, p] : module.named_parameters())
    expect_close(p.grad(), p64.at(name).grad(), tol, tol, name + " gradient");
}

// ---- registry

struct Block : nn::Module {
  Tensor scale, running;
  std::shared_ptr<nn::Linear> proj;
  Block() {
    scale = lt::ones({4});
    running = lt::zeros({4});
    register_parameter("scale", scale);
    register_buffer("running", running);
    proj = register_module("proj", std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) const { return (*proj)(x * scale) + running; }
  std::string name() const override { return "Block"; }
};

TEST(Module, DottedNamesInRegistrationOrder) {
  nn::DecoderConfig cfg{.vocab = 16,
                        .hidden = 8,
                        .intermediate = 12,
                        .heads = 2,
                        .kv_heads = 1,
                        .layers = 4,
                        .max_seq = 8};
  nn::DecoderLM lm(cfg);
  nn::ParamMap params = lm.named_parameters();
  std::vector<std::string> names = params.keys();
  ASSERT_EQ(names.size(), 1 + 4 * 9 + 2u);
  EXPECT_EQ(names.front(), "embed.weight");
  EXPECT_EQ(names[1], "layers.0.attn_norm.weight");
  EXPECT_EQ(names[2], "layers.0.attn.q_proj.weight");
  EXPECT_TRUE(params.contains("layers.3.attn.q_proj.weight"));
  EXPECT_TRUE(params.contains("layers.3.mlp.down_proj.weight"));
  EXPECT_EQ(names.back(), "head.weight");
  EXPECT_EQ(params.at("layers.1.attn.k_proj.weight").shape(), (lt::Shape{4, 8}));  // 1 kv head
  EXPECT_EQ(params.at("layers.1.attn.q_proj.weight").shape(), (lt::Shape{8, 8}));
  EXPECT_EQ(lm.parameters().size(), names.size());
  for (const Tensor& p : lm.parameters()) EXPECT_TRUE(p.requires_grad());

  Block b;
  EXPECT_EQ(b.named_parameters().keys(),
            (std::vector<std::string>{"scale", "proj.weight", "proj.bias"}));
  EXPECT_EQ(b.named_buffers().keys(), (std::vector<std::string>{"running"}));
  EXPECT_FALSE(b.named_buffers().at("running").requires_grad());
}

TEST(Module, ZeroGradTrainEvalAndTo) {
  Block b;
  lt::sum(b.forward(lt::ones({2, 4}))).backward();
  for (const Tensor& p : b.parameters()) EXPECT_TRUE(p.grad().defined());
  b.zero_grad();
  for (const Tensor& p : b.parameters()) EXPECT_FALSE(p.grad().defined());
  b.eval();
  EXPECT_FALSE(b.is_training());
  EXPECT_FALSE(b.proj->is_training());
  b.train();
  EXPECT_TRUE(b.proj->is_training());
  b.to(lt::float64);
  EXPECT_EQ(b.proj->weight.dtype(), lt::float64);
  EXPECT_EQ(b.running.dtype(), lt::float64);
  EXPECT_TRUE(b.proj->weight.requires_grad());
  EXPECT_EQ(b.named_parameters().at("proj.weight").dtype(), lt::float64);
}

// to() gives the module new tensors: an optimizer made before would go on updating the old
// ones while the module trains the new (silently learning nothing). It refuses, converting
// nothing; once the optimizer is gone, or for the dtype the parameters have, it converts.
TEST(Module, ToRefusesParametersAnOptimizerHolds) {
  Block b;
  {
    lt::optim::SGD opt(b.parameters(), {.lr = 0.1});
    expect_error([&] { b.to(lt::float64); },
                 {"[Module.to] parameter 'scale' (f32[4]) is held by an optimizer made before "
                  "this conversion to float64",
                  "convert the module first, then make the optimizer"});
    EXPECT_EQ(b.proj->weight.dtype(), lt::float32);
    EXPECT_EQ(b.running.dtype(), lt::float32);
    b.to(lt::float32);  // nothing to convert
  }
  b.to(lt::float64);
  EXPECT_EQ(b.proj->weight.dtype(), lt::float64);
  lt::optim::SGD opt(b.parameters(), {.lr = 0.5});
  const std::vector<double> before = b.proj->weight.to_vector<double>();
  lt::sum(b.forward(lt::ones({2, 4}, lt::float64))).backward();
  const std::vector<double> g = b.proj->weight.grad().to_vector<double>();
  opt.step();
  const std::vector<double> after = b.proj->weight.to_vector<double>();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_DOUBLE_EQ(after[i], before[i] - 0.5 * g[i]);
}

TEST(Module, FunctionalCallUsesTheGivenTensorsAndRestoresTheModule) {
  Block b;
  Tensor x = random_tensor({3, 4}, 1);
  Tensor own = b.forward(x);
  nn::ParamMap params = {{"proj.weight", random_tensor({4, 4}, 2)}, {"scale", lt::full({4}, 2.0f)}};
  nn::ParamMap buffers = {{"running", lt::full({4}, 0.5f)}};
  Tensor swapped = nn::functional_call(b, params, buffers, x);
  // the same computation written out
  Tensor want = lt::matmul(x * 2.0f, lt::transpose(params.at("proj.weight"))) + b.proj->bias + 0.5f;
  expect_close(swapped, want, 1e-6, 1e-6, "functional_call output");
  expect_close(b.forward(x), own, 0, 0, "module after the call");
  // gradients flow to the tensors that were passed in
  nn::ParamMap trained = {{"scale", lt::full({4}, 2.0f).requires_grad_()}};
  lt::sum(nn::functional_call(b, trained, {}, x)).backward();
  EXPECT_TRUE(trained.at("scale").grad().defined());
  EXPECT_FALSE(b.scale.grad().defined());
}

TEST(Module, Errors) {
  Block b;
  Tensor x = lt::ones({2, 4});
  expect_error(
      [&] {
        nn::functional_call(b, {{"nope.weight", lt::ones({4})}}, {}, x);
      },
      "[functional_call] Block has no parameter named 'nope.weight'");
  expect_error(
      [&] {
        nn::functional_call(b, {{"running", lt::ones({4})}}, {}, x);
      },
      "has no parameter named 'running'");
  expect_error(
      [&] {
        nn::functional_call(b, {{"scale", lt::ones({5})}}, {}, x);
      },
      "[functional_call] parameter 'scale' is f32[5] but the module's is f32[4]");
  Tensor before = b.scale;
  expect_error(
      [&] {
        nn::functional_call(b, {{"scale", lt::ones({4})}}, {}, lt::ones({2, 3}));
      },
      "[mul] shapes [2, 3] and [4] cannot be broadcast");
  expect_error([] { nn::Linear(4, 2).forward(lt::ones({3})); },
               "[Linear] input f32[3] must have 4 features in its last dim");
  EXPECT_EQ(b.scale.impl(), before.impl());  // restored after the throw
  expect_error([] { nn::Linear(0, 3); }, "[Linear] in_features and out_features must be positive");
  expect_error([] { nn::Dropout(1.5); }, "[Dropout] p must be in [0, 1]");
  expect_error([] { nn::Embedding(4, 2).forward(lt::tensor({0.0f})); },
               "[Embedding] indices must be int32 or int64, got f32[1]");
  expect_error(
      [] {
        nn::DecoderConfig c{.hidden = 10, .heads = 4};
        c.validate();
      },
      "[DecoderConfig] hidden (10) must be a multiple of heads (4)");
  expect_error(
      [] {
        nn::DecoderConfig c{.heads = 4, .kv_heads = 3};
        c.validate();
      },
      "heads (4) must be a multiple of kv_heads (3)");
  expect_error(
      [] {
        nn::DecoderLM lm({.vocab = 8,
                          .hidden = 8,
                          .intermediate = 8,
                          .heads = 2,
                          .kv_heads = 2,
                          .layers = 1,
                          .max_seq = 4});
        lm(lt::zeros({1, 5}, lt::int64));
      },
      "[DecoderLM] a sequence of 5 tokens is longer than max_seq = 4");
  expect_error([] { nn::ModuleList().operator[](0); }, "[ModuleList] index 0 is out of range");
  struct IntParam : nn::Module {
    Tensor t = lt::tensor({1, 2});
    IntParam() { register_parameter("t", t); }
    std::string name() const override { return "IntParam"; }
  };
  expect_error([] { IntParam p; }, "[requires_grad_] only floating tensors");
  struct Twice : nn::Module {
    Tensor a = lt::ones({1}), b = lt::ones({1});
    Twice() {
      register_parameter("a", a);
      register_parameter("a", b);
    }
    std::string name() const override { return "Twice"; }
  };
  expect_error([] { Twice t; }, "[Twice] a member named 'a' is already registered");
}

// ---- layers against float64 references

TEST(Layers, LinearMatchesReference) {
  nn::Linear lin(5, 3);
  compare_with_reference(
      lin, random_tensor({2, 4, 5}, 3), [&](const Tensor& x) { return lin(x); },
      [](const Tensor& x, const nn::ParamMap& p) {
        return lt::matmul(x, lt::transpose(p.at("weight"))) + p.at("bias");
      },
      1e-5);
  nn::Linear no_bias(4, 2, false);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
}

TEST(Layers, LinearInitializationBound) {
  nn::Linear lin(64, 32);
  std::vector<float> w = lin.weight.to_vector<float>();
  double lo = 0, hi = 0, mean = 0;
  for (float v : w) {
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
    mean += v / w.size();
  }
  EXPECT_GE(lo, -1 / 8.0);  // U(-1/sqrt(in), 1/sqrt(in))
  EXPECT_LE(hi, 1 / 8.0);
  EXPECT_LT(lo, -0.1);
  EXPECT_GT(hi, 0.1);
  EXPECT_NEAR(mean, 0, 0.01);
}

TEST(Layers, LayerNormMatchesReference) {
  nn::LayerNorm ln(6);
  {  // non-trivial affine parameters
    lt::NoGradGuard g;
    ln.weight.copy_(random_tensor({6}, 4) + 1.0f);
    ln.bias.copy_(random_tensor({6}, 5));
  }
  compare_with_reference(
      ln, random_tensor({3, 6}, 6, 2), [&](const Tensor& x) { return ln(x); },
      [](const Tensor& x, const nn::ParamMap& p) {
        // written differently from the layer: variance as E[x^2] - E[x]^2
        const double n = 6;
        Tensor mu = lt::sum(x, {1}, true) / n;
        Tensor var = lt::sum(x * x, {1}, true) / n - mu * mu;
        return (x - mu) / lt::sqrt(var + 1e-5) * p.at("weight") + p.at("bias");
      },
      1e-5);
}

TEST(Layers, LayerNormWithoutAffineNormalizesOnly) {
  nn::LayerNorm ln(5, 1e-3, false);
  EXPECT_FALSE(ln.weight.defined());
  EXPECT_FALSE(ln.bias.defined());
  EXPECT_TRUE(ln.parameters().empty());
  Tensor x = random_tensor({4, 5}, 9, 3).requires_grad_();
  Tensor y = ln(x);
  const std::vector<float> xs = x.to_vector<float>(), ys = y.to_vector<float>();
  for (int r = 0; r < 4; ++r) {
    double mu = 0, var = 0;
    for (int c = 0; c < 5; ++c) mu += xs[r * 5 + c] / 5.0;
    for (int c = 0; c < 5; ++c) var += (xs[r * 5 + c] - mu) * (xs[r * 5 + c] - mu) / 5.0;
    for (int c = 0; c < 5; ++c)
      EXPECT_NEAR(ys[r * 5 + c], (xs[r * 5 + c] - mu) / std::sqrt(var + 1e-3), 1e-5) << r << c;
  }
  // the gradient of a sum of normalized values is 0: each row's shift cancels it
  lt::sum(y).backward();
  for (float g : x.grad().to_vector<float>()) EXPECT_NEAR(g, 0.0f, 1e-5f);
}

TEST(Layers, RMSNormMatchesReference) {
  nn::RMSNorm rms(6, 1e-6);
  {
    lt::NoGradGuard g;
    rms.weight.copy_(random_tensor({6}, 7) + 1.0f);
  }
  compare_with_reference(
      rms, random_tensor({2, 3, 6}, 8), [&](const Tensor& x) { return rms(x); },
      [](const Tensor& x, const nn::ParamMap& p) {
        return x / lt::sqrt(lt::sum(x * x, {-1}, true) / 6.0 + 1e-6) * p.at("weight");
      },
      1e-5);
}

TEST(Layers, EmbeddingRowsAndRepeatedIndexGradients) {
  nn::Embedding emb(5, 3);
  Tensor idx = lt::tensor(std::vector<int64_t>{4, 1, 4, 0, 4, 2}, {2, 3});
  Tensor out = emb(idx);
  ASSERT_EQ(out.shape(), (lt::Shape{2, 3, 3}));
  std::vector<float> w = emb.weight.to_vector<float>(), o = out.to_vector<float>();
  const int64_t rows[] = {4, 1, 4, 0, 4, 2};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(o[i * 3 + j], w[rows[i] * 3 + j]);
  Tensor r = random_tensor({2, 3, 3}, 9);
  lt::sum(out * r).backward();
  std::vector<float> g = emb.weight.grad().to_vector<float>(), rv = r.to_vector<float>();
  std::vector<double> want(15, 0.0);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j) want[rows[i] * 3 + j] += rv[i * 3 + j];
  for (int k = 0; k < 15; ++k) EXPECT_NEAR(g[k], want[k], 1e-6) << k;
}

// As torch's, an index outside [0, num) is an error, negative ones included (index_select,
// which Python indexing uses, wraps them): for host indices at once, for indices computed in
// the graph when the rows are, inside traced bodies too.
TEST(Layers, EmbeddingIndicesOutOfRangeAreAnError) {
  nn::Embedding emb(5, 3);
  for (int64_t bad : {-1, 5, -6}) {
    const std::string want = "[Embedding] index " + std::to_string(bad) +
                             " at position 1 is out of range for 5 embeddings; indices must be "
                             "in [0, 5)";
    expect_error([&] { emb(lt::tensor(std::vector<int64_t>{0, bad}, {2})); }, want);
  }
  Tensor data = lt::tensor(std::vector<int32_t>{1, 4, 9, 2}, {4});
  Tensor pending = emb(lt::slice(data, 0, 1, 4));
  ASSERT_TRUE(pending.is_pending());
  expect_error([&] { (void)pending.to_vector<float>(); },
               "[Embedding] index 9 at position 1 is out of range for 5 embeddings");
  auto f = lt::assume_pure([](const Tensor& w, const Tensor& i) { return nn::embedding(i, w); });
  const std::vector<float> w = emb.weight.to_vector<float>();
  std::vector<float> got =
      f(emb.weight, lt::tensor(std::vector<int64_t>{4, 0}, {2})).to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(got[j], w[4 * 3 + j]);
    EXPECT_EQ(got[3 + j], w[j]);
  }
  expect_error(
      [&] {
        (void)f(emb.weight, lt::tensor(std::vector<int64_t>{4, -1}, {2})).to_vector<float>();
      },
      "[Embedding] index -1 at position 1 is out of range for 5 embeddings");
  expect_error([&] { nn::embedding(lt::tensor({0}), lt::ones({5})); },
               "[Embedding] the weight must be [num_embeddings, embedding_dim], got f32[5]");
}

TEST(Layers, DropoutTrainingAndEval) {
  nn::Dropout drop(0.25);
  Tensor x = lt::ones({100000});
  std::vector<float> y = drop(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    if (v == 0) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1 / 0.75f);
    }
  }
  EXPECT_NEAR(zeros / 100000.0, 0.25, 0.01);
  drop.eval();
  EXPECT_EQ(drop(x).impl(), x.impl());  // identity
}

// The attention reference: per-head loops, kv heads repeated by index, rotary tables and
// the causal mask built on the host.
Tensor attention_reference(const Tensor& x, const nn::ParamMap& p, const std::string& prefix,
                           const nn::DecoderConfig& c) {
  const int64_t b = x.size(0), t = x.size(1), hd = c.head_dim();
  auto proj = [&](const Tensor& in, const char* name) {
    return lt::matmul(in, lt::transpose(p.at(prefix + name)));
  };
  Tensor q = proj(x, "q_proj.weight"), k = proj(x, "k_proj.weight"), v = proj(x, "v_proj.weight");
  std::vector<double> cos_t(t * hd), sin_t(t * hd), mask(t * t);
  for (int64_t pos = 0; pos < t; ++pos)
    for (int64_t i = 0; i < hd; ++i) {
      const double freq = std::pow(c.rope_theta, -2.0 * static_cast<double>(i % (hd / 2)) / hd);
      cos_t[pos * hd + i] = std::cos(pos * freq);
      sin_t[pos * hd + i] = std::sin(pos * freq);
    }
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) mask[i * t + j] = j <= i ? 0 : -1e30;
  Tensor cos_h = lt::tensor(cos_t, {t, hd}), sin_h = lt::tensor(sin_t, {t, hd});
  Tensor mask_h = lt::tensor(mask, {t, t});
  auto rope = [&](const Tensor& h) {  // h [b, t, hd]
    Tensor rot = lt::concat({-lt::slice(h, 2, hd / 2, hd), lt::slice(h, 2, 0, hd / 2)}, 2);
    return h * cos_h + rot * sin_h;
  };
  std::vector<Tensor> heads;
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t h = 0; h < c.heads; ++h) {
    const int64_t kvh = h / group;
    Tensor qh = lt::slice(q, 2, h * hd, (h + 1) * hd);
    Tensor kh = lt::slice(k, 2, kvh * hd, (kvh + 1) * hd);
    Tensor vh = lt::slice(v, 2, kvh * hd, (kvh + 1) * hd);
    if (c.positions == nn::Positions::rotary) {
      qh = rope(qh);
      kh = rope(kh);
    }
    Tensor s = lt::matmul(qh, lt::transpose(kh)) / std::sqrt(static_cast<double>(hd)) + mask_h;
    Tensor e = lt::exp(s - lt::amax(s, {-1}, true));
    heads.push_back(lt::matmul(e / lt::sum(e, {-1}, true), vh));
  }
  (void)b;
  return proj(lt::concat(heads, 2), "o_proj.weight");
}

Tensor rms_reference(const Tensor& x, const Tensor& w, double eps) {
  return x / lt::sqrt(lt::mean(x * x, {-1}, true) + eps) * w;
}

Tensor layer_reference(const Tensor& x, const nn::ParamMap& p, const std::string& pre,
                       const nn::DecoderConfig& c) {
  Tensor h = x + attention_reference(rms_reference(x, p.at(pre + "attn_norm.weight"), c.norm_eps),
                                     p, pre + "attn.", c);
  Tensor n = rms_reference(h, p.at(pre + "mlp_norm.weight"), c.norm_eps);
  auto proj = [&](const Tensor& in, const std::string& name) {
    return lt::matmul(in, lt::transpose(p.at(pre + "mlp." + name + ".weight")));
  };
  Tensor gate = proj(n, "gate_proj");
  return h + proj(gate * lt::sigmoid(gate) * proj(n, "up_proj"), "down_proj");
}

const nn::DecoderConfig kSmall{.vocab = 32,
                               .hidden = 16,
                               .intermediate = 24,
                               .heads = 4,
                               .kv_heads = 2,
                               .layers = 2,
                               .max_seq = 16};

TEST(Layers, AttentionMatchesReference) {
  nn::CausalSelfAttention attn(kSmall);
  compare_with_reference(
      attn, random_tensor({2, 5, 16}, 10), [&](const Tensor& x) { return attn(x); },
      [](const Tensor& x, const nn::ParamMap& p) { return attention_reference(x, p, "", kSmall); },
      2e-5);
}

TEST(Layers, AttentionWithoutRotaryAndFullHeadsMatchesReference) {
  nn::DecoderConfig c = kSmall;
  c.positions = nn::Positions::learned;
  c.kv_heads = 4;
  nn::CausalSelfAttention attn(c);
  compare_with_reference(
      attn, random_tensor({1, 6, 16}, 11), [&](const Tensor& x) { return attn(x); },
      [&](const Tensor& x, const nn::ParamMap& p) { return attention_reference(x, p, "", c); },
      2e-5);
}

TEST(Layers, DecoderLayerMatchesReference) {
  nn::DecoderLayer layer(kSmall);
  {
    lt::NoGradGuard g;
    layer.attn_norm->weight.copy_(random_tensor({16}, 12) + 1.0f);
    layer.mlp_norm->weight.copy_(random_tensor({16}, 13) + 1.0f);
  }
  compare_with_reference(
      layer, random_tensor({2, 7, 16}, 14), [&](const Tensor& x) { return layer(x); },
      [](const Tensor& x, const nn::ParamMap& p) { return layer_reference(x, p, "", kSmall); },
      3e-5);
}

TEST(Layers, DecoderLMMatchesReference) {
  nn::DecoderLM lm(kSmall);
  Tensor tokens = lt::tensor(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, {2, 5});
  Tensor logits = lm(tokens);
  ASSERT_EQ(logits.shape(), (lt::Shape{2, 5, 32}));
  Tensor loss = nn::cross_entropy(logits, tokens);
  loss.backward();
  nn::ParamMap p64;
  for (const auto& [name, p] : lm.named_parameters()) p64.insert(name, f64(p).requires_grad_());
  Tensor h = lt::index_select(p64.at("embed.weight"), 0, lt::reshape(tokens, {-1}));
  h = lt::reshape(h, {2, 5, 16});
  for (int l = 0; l < 2; ++l)
    h = layer_reference(h, p64, "layers." + std::to_string(l) + ".", kSmall);
  h = rms_reference(h, p64.at("norm.weight"), kSmall.norm_eps);
  Tensor ref_logits = lt::matmul(h, lt::transpose(p64.at("head.weight")));
  expect_close(logits, ref_logits, 3e-5, 3e-5, "logits");
  // cross-entropy written out: mean of logsumexp - picked logit
  Tensor flat = lt::reshape(ref_logits, {10, 32});
  Tensor lse = lt::log(lt::sum(lt::exp(flat), {1}));
  Tensor picked = lt::sum(
      flat * lt::astype(lt::unsqueeze(lt::reshape(tokens, {-1}), 1) == lt::arange(32), lt::float64),
      {1});
  Tensor ref_loss = lt::mean(lse - picked);
  expect_close(loss, ref_loss, 1e-5, 1e-5, "loss");
  ref_loss.backward();
  for (const auto& [name, p] : lm.named_parameters())
    expect_close(p.grad(), p64.at(name).grad(), 3e-5, 3e-4, name + " gradient");
}

TEST(Layers, LearnedPositionsAddAPositionEmbedding) {
  nn::DecoderConfig c = kSmall;
  c.positions = nn::Positions::learned;
  nn::DecoderLM lm(c);
  EXPECT_EQ(lm.named_parameters().at("pos_embed.weight").shape(), (lt::Shape{16, 16}));
  Tensor tokens = lt::tensor(std::vector<int64_t>{7, 7, 7}, {1, 3});
  lt::sum(lm(tokens)).backward();
  std::vector<float> g = lm.pos_embed->weight.grad().to_vector<float>();
  // rows 0..2 are used, the rest get zero gradient
  double used = 0, unused = 0;
  for (int i = 0; i < 16 * 16; ++i) (i < 3 * 16 ? used : unused) += std::fabs(g[i]);
  EXPECT_GT(used, 0);
  EXPECT_EQ(unused, 0);
}

// ---- losses

// Host targets with the default ignore_index, and targets computed in the graph (a slice,
// as in a training loop) with another one.
TEST(Losses, CrossEntropyMatchesALoopWithIgnoreIndex) {
  const int n = 6, c = 5;
  for (const bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "targets a slice, ignore_index 3" : "host targets, ignore_index -100");
    const int64_t ignore = lazy ? 3 : -100;
    Tensor logits = random_tensor({n, c}, 20, 2).requires_grad_();
    std::vector<int64_t> t = {0, 4, ignore, 2, 2, 1};
    Tensor targets = lt::tensor(t, {n});
    if (lazy) {
      std::vector<int64_t> padded = t;
      padded.insert(padded.begin(), 99);  // sliced away, never checked
      targets = lt::slice(lt::tensor(padded, {n + 1}), 0, 1, n + 1);
      ASSERT_TRUE(targets.is_pending());
    }
    Tensor loss = nn::cross_entropy(logits, targets, ignore);
    loss.backward();
    std::vector<float> z = logits.to_vector<float>();
    double total = 0;
    int count = 0;
    std::vector<double> grad(n * c, 0.0);
    for (int i = 0; i < n; ++i) {
      if (t[i] == ignore) continue;
      double mx = -1e30, s = 0;
      for (int j = 0; j < c; ++j) mx = std::max<double>(mx, z[i * c + j]);
      for (int j = 0; j < c; ++j) s += std::exp(z[i * c + j] - mx);
      total += mx + std::log(s) - z[i * c + t[i]];
      ++count;
      for (int j = 0; j < c; ++j) grad[i * c + j] = std::exp(z[i * c + j] - mx) / s - (j == t[i]);
    }
    EXPECT_NEAR(loss.item<float>(), total / count, 1e-5);
    std::vector<float> g = logits.grad().to_vector<float>();
    for (int k = 0; k < n * c; ++k) EXPECT_NEAR(g[k], grad[k] / count, 1e-6) << k;
  }
}

// The header's promise holds for targets not yet computed: the loss's sync fails, naming
// the target, and the tensors stay usable.
TEST(Losses, CrossEntropyOfOutOfRangeTargetsComputedInTheGraphIsAnError) {
  Tensor data = lt::tensor(std::vector<int64_t>{0, 1, 2, 7, 1}, {1, 5});
  Tensor logits = lt::zeros({4, 3});
  Tensor loss = nn::cross_entropy(logits, lt::reshape(lt::slice(data, 1, 1, 5), {4}));
  ASSERT_TRUE(loss.is_pending());
  expect_error([&] { (void)loss.item<float>(); },
               {"[cross_entropy] target 7 at position 2 is out of range for 3 classes",
                "ignore_index (-100)"});
  Tensor ok = nn::cross_entropy(lt::zeros({3, 3}), lt::reshape(lt::slice(data, 1, 0, 3), {3}));
  EXPECT_NEAR(ok.item<float>(), std::log(3.0), 1e-6);
  // inside a traced body the check runs with the body
  auto f =
      lt::assume_pure([](const Tensor& z, const Tensor& t) { return nn::cross_entropy(z, t); });
  const Tensor good = lt::tensor(std::vector<int64_t>{0, 1, 2, 1}, {4}),
               bad = lt::tensor(std::vector<int64_t>{0, 3, 2, 1}, {4});
  EXPECT_NEAR(f(logits, good).item<float>(), std::log(3.0), 1e-6);
  expect_error([&] { (void)f(logits, bad).item<float>(); },
               "[cross_entropy] target 3 at position 1 is out of range for 3 classes");
}

TEST(Losses, CrossEntropyIsStableForHugeLogits) {
  Tensor logits = lt::tensor(std::vector<float>{1000, 0, -1000, 0, 1000, 0}, {2, 3});
  Tensor loss = nn::cross_entropy(logits, lt::tensor({0, 2}));
  EXPECT_NEAR(loss.item<float>(), (0.0 + 1000.0 + std::log1p(std::exp(-1000.0))) / 2, 1e-3);
}

// A class masked with -inf (a vocabulary mask) leaves the loss finite, as torch's: a one-hot
// product would give -inf * 0 = NaN. nll_loss takes the log-probabilities; reductions as torch.
TEST(Losses, CrossEntropyOfMaskedLogitsAndNllLossReductions) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor logits = lt::tensor(std::vector<float>{-inf, 0, 1, 2, 0, 1, -inf, 3, 0}, {3, 3});
  Tensor targets = lt::tensor(std::vector<int64_t>{2, 0, -100}, {3});
  const double l0 = -(1 - std::log(1 + std::exp(1.0))),
               l1 = -(2 - std::log(std::exp(2.0) + 1 + std::exp(1.0)));
  EXPECT_NEAR(nn::cross_entropy(logits, targets).item<float>(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(nn::cross_entropy(logits, targets, -100, nn::Reduction::Sum).item<float>(), l0 + l1,
              1e-6);
  const std::vector<float> none =
      nn::nll_loss(lt::log_softmax(logits, -1), targets, -100, nn::Reduction::None)
          .to_vector<float>();
  ASSERT_EQ(none.size(), 3u);
  EXPECT_NEAR(none[0], l0, 1e-6);
  EXPECT_NEAR(none[1], l1, 1e-6);
  EXPECT_EQ(none[2], 0.0f);
  expect_error(
      [&] {
        nn::nll_loss(logits, lt::tensor({5, 0, 1}));
      },
      "[nll_loss] target 5 at position 0 is out of range for 3 classes");
}

TEST(Losses, MseLossAndErrors) {
  Tensor a = lt::tensor({1.0f, 2.0f, 4.0f}).requires_grad_();
  Tensor b = lt::tensor({0.0f, 2.0f, 1.0f});
  Tensor loss = nn::mse_loss(a, b);
  EXPECT_NEAR(loss.item<float>(), (1 + 0 + 9) / 3.0, 1e-6);
  loss.backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{2 / 3.0f, 0, 2.0f}));
  Tensor logits = lt::zeros({2, 3});
  expect_error(
      [&] {
        nn::cross_entropy(logits, lt::tensor({0, 3}));
      },
      "[cross_entropy] target 3 at position 1 is out of range for 3 classes");
  expect_error(
      [&] {
        nn::cross_entropy(logits, lt::tensor({0, 1, 2}));
      },
      "targets i64[3] must have the leading shape [2] of f32[2, 3]");
  expect_error(
      [&] {
        nn::cross_entropy(logits, lt::tensor({0.0f, 1.0f}));
      },
      "targets must be int32 or int64");
}

// ---- gradient clipping against a loop in double

TEST(ClipGrad, NormAndValueMatchALoop) {
  const std::vector<float> ga = {3, -4, 0.5f, 2}, gb = {-1, 7, 0.25f};
  for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Tensor a = lt::zeros({2, 2}).requires_grad_(), b = lt::zeros({3}).requires_grad_();
    Tensor frozen = lt::zeros({2}).requires_grad_();  // no gradient: skipped
    a.set_grad(lt::tensor(ga, {2, 2}));
    b.set_grad(lt::tensor(gb, {3}));
    double ref = 0;
    for (const auto* g : {&ga, &gb})
      for (float v : *g)
        ref = std::isinf(p) ? std::max(ref, std::abs(double{v})) : ref + std::pow(std::abs(v), p);
    if (!std::isinf(p)) ref = std::pow(ref, 1 / p);
    const Tensor held = a.grad();  // sees the clipping: in place
    const Tensor total = nn::clip_grad_norm_({a, b, frozen}, 1.5, p);
    EXPECT_NEAR(total.item<float>(), ref, 1e-6 * ref) << p;
    const double coef = 1.5 / (ref + 1e-6);
    for (size_t i = 0; i < ga.size(); ++i)
      EXPECT_NEAR(held.to_vector<float>()[i], ga[i] * coef, 1e-6) << p;
    for (size_t i = 0; i < gb.size(); ++i)
      EXPECT_NEAR(b.grad().to_vector<float>()[i], gb[i] * coef, 1e-6) << p;
    EXPECT_FALSE(frozen.grad().defined());
  }
  Tensor c = lt::zeros({3}).requires_grad_();
  c.set_grad(lt::tensor({-2.0f, 0.5f, 9.0f}));
  nn::clip_grad_value_({c}, 1.0);
  EXPECT_EQ(c.grad().to_vector<float>(), (std::vector<float>{-1, 0.5f, 1}));
  EXPECT_EQ(nn::clip_grad_norm_({c}, 10).item<float>(), std::sqrt(2.25f));  // under: unchanged
  EXPECT_EQ(c.grad().to_vector<float>(), (std::vector<float>{-1, 0.5f, 1}));
  c.set_grad(lt::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f}));
  expect_error([&] { nn::clip_grad_norm_({c}, 1.0, 2.0, true); },
               "[clip_grad_norm_] the total norm of order 2 of the gradients is inf");
  expect_error([&] { nn::clip_grad_norm_({c}, -1.0); },
               "[clip_grad_norm_] max_norm must be a number >= 0, got -1");
  expect_error([&] { nn::grad_norm({c}, 0); }, "[total_norm] norm_type must be positive");
  expect_error(
      [&] {
        nn::total_norm({lt::tensor({1, 2})});
      },
      "[total_norm] tensor 0 is i64[2]; a norm takes floating tensors");
}

// ---- optimizers against the update rules written as loops

TEST(Optim, SGDWithMomentumWeightDecayAndNesterovMatchesALoop) {
  for (bool nesterov : {false, true}) {
    Tensor w = lt::tensor({1.0, -2.0, 0.5}).requires_grad_();
    lt::optim::SGD opt(
        {w},
        {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .dampening = 0, .nesterov = nesterov});
    std::vector<double> ref = {1.0, -2.0, 0.5}, buf(3, 0.0);
    for (int step = 0; step < 4; ++step) {
      lt::sum(w * w * w).backward();  // g = 3 w^2
      opt.step();
      opt.zero_grad();
      lt::sync();
      for (int i = 0; i < 3; ++i) {
        double g = 3 * ref[i] * ref[i] + 0.01 * ref[i];
        buf[i] = step == 0 ? g : 0.9 * buf[i] + g;
        ref[i] -= 0.1 * (nesterov ? g + 0.9 * buf[i] : buf[i]);
      }
    }
    std::vector<double> got = w.to_vector<double>();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << nesterov << " " << i;
  }
}

class AdamWFused : public ::testing::TestWithParam<bool> {};

TEST_P(AdamWFused, MatchesALoopAndEveryStepIsOneCachedGraph) {
  Tensor w = lt::tensor({1.0, -2.0, 0.5}).requires_grad_();
  Tensor x = lt::tensor({0.5, 1.5, -1.0});
  lt::optim::AdamW opt({w}, {.lr = 0.05,
                             .beta1 = 0.8,
                             .beta2 = 0.95,
                             .eps = 1e-8,
                             .weight_decay = 0.1,
                             .fused = GetParam()});
  lt::metrics::reset();
  std::vector<double> ref = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  const double xs[] = {0.5, 1.5, -1.0};
  for (int step = 1; step <= 6; ++step) {
    if (step == 4) opt.set_lr(0.02);  // a schedule: no recompile
    lt::sum(lt::tanh(w * x)).backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
    const double lr = step >= 4 ? 0.02 : 0.05;
    for (int i = 0; i < 3; ++i) {
      double g = xs[i] * (1 - std::pow(std::tanh(ref[i] * xs[i]), 2));
      ref[i] *= 1 - lr * 0.1;
      m[i] = 0.8 * m[i] + 0.2 * g;
      v[i] = 0.95 * v[i] + 0.05 * g * g;
      double mh = m[i] / (1 - std::pow(0.8, step)), vh = v[i] / (1 - std::pow(0.95, step));
      ref[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  std::vector<double> got = w.to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << i;
  EXPECT_EQ(lt::metrics::counter("CompileCount"), 1);
  EXPECT_EQ(lt::metrics::counter("CacheHit"), 5);
}

INSTANTIATE_TEST_SUITE_P(Optim, AdamWFused, ::testing::Bool());

// PyTorch counts updates per parameter (state['step']): one whose first gradient comes at
// step 3 gets the bias correction of its own first update, and SGD's first momentum buffer
// is its gradient undamped. The reference loops keep a count per parameter.
TEST_P(AdamWFused, AParameterFirstUpdatedLaterCountsItsOwnSteps) {
  Tensor a = lt::tensor({1.0, -2.0}).requires_grad_(), b = lt::tensor({0.5, 3.0}).requires_grad_();
  lt::optim::AdamW opt({a, b}, {.lr = 0.05, .weight_decay = 0.1, .fused = GetParam()});
  std::vector<double> ref[2] = {{1.0, -2.0}, {0.5, 3.0}}, m[2], v[2];
  int count[2] = {0, 0};
  for (auto& x : m) x.assign(2, 0.0);
  for (auto& x : v) x.assign(2, 0.0);
  int64_t compiles_at_4 = 0;
  for (int step = 1; step <= 6; ++step) {
    Tensor loss = lt::sum(a * a);
    if (step >= 3) loss = loss + lt::sum(lt::tanh(b));
    loss.backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
    if (step == 4) compiles_at_4 = lt::metrics::counter("CompileCount");
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && step < 3) continue;
      const int t = ++count[p];
      for (int i = 0; i < 2; ++i) {
        const double x = ref[p][i];
        const double g = p == 0 ? 2 * x : 1 - std::tanh(x) * std::tanh(x);
        ref[p][i] = x * (1 - 0.05 * 0.1);
        m[p][i] = 0.9 * m[p][i] + 0.1 * g;
        v[p][i] = 0.999 * v[p][i] + 0.001 * g * g;
        const double mh = m[p][i] / (1 - std::pow(0.9, t)), vh = v[p][i] / (1 - std::pow(0.999, t));
        ref[p][i] -= 0.05 * mh / (std::sqrt(vh) + 1e-8);
      }
    }
    const std::vector<double> ga = a.to_vector<double>(), gb = b.to_vector<double>();
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(ga[i], ref[0][i], 1e-12) << "step " << step;
      EXPECT_NEAR(gb[i], ref[1][i], 1e-12) << "step " << step;
    }
  }
  EXPECT_EQ(lt::metrics::counter("CompileCount"), compiles_at_4) << "steps 5 and 6 are cached";
}

TEST(Optim, SGDMomentumOfAParameterFirstUpdatedLaterStartsFromItsGradient) {
  Tensor a = lt::tensor({1.0}).requires_grad_(), b = lt::tensor({2.0}).requires_grad_();
  lt::optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  double ref[2] = {1.0, 2.0}, buf[2] = {0, 0};
  int count[2] = {0, 0};
  for (int step = 1; step <= 4; ++step) {
    Tensor loss = lt::sum(a * a);
    if (step >= 2) loss = loss + lt::sum(b * b * b);
    loss.backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && step < 2) continue;
      const double g = p == 0 ? 2 * ref[p] : 3 * ref[p] * ref[p];
      buf[p] = count[p]++ == 0 ? g : 0.9 * buf[p] + 0.5 * g;
      ref[p] -= 0.1 * buf[p];
    }
    EXPECT_NEAR(a.to_vector<double>()[0], ref[0], 1e-12) << "step " << step;
    EXPECT_NEAR(b.to_vector<double>()[0], ref[1], 1e-12) << "step " << step;
  }
}

// The fused update (one adamw_update op per parameter) against the same update op by op:
// the same float operations in the same order, so every dtype gives identical bits, over
// several steps (the moments feed back) and a size with vector tails and several chunks.
TEST(Optim, FusedAdamWIsBitIdenticalToTheUpdateOpByOp) {
  for (lt::DType dt : {lt::float32, lt::float64, lt::float16, lt::bfloat16}) {
    const int64_t n = 70001;
    lt::manual_seed(11);
    Tensor init = lt::astype(lt::randn({n}), dt);
    std::vector<Tensor> grads;
    for (int s = 0; s < 3; ++s) grads.push_back(lt::astype(lt::randn({n}) * (s + 1), dt));
    std::vector<std::vector<float>> result;
    // fused (in place: p, m and v are donated), fused with a handle on the parameter's old
    // value (m and v in place, p not), and op by op
    for (int run = 0; run < 3; ++run) {
      const bool fused = run < 2, keep_old = run == 1;
      Tensor w = lt::clone(init).requires_grad_();
      // eps above float16's smallest number: with 1e-8 a moment that underflows gives 0 / 0
      lt::optim::AdamW opt({w}, {.lr = 0.01, .eps = 1e-3, .weight_decay = 0.1, .fused = fused});
      for (const Tensor& g : grads) {
        w.set_grad(g);
        Tensor old = keep_old ? w.detach() : Tensor();
        const std::vector<float> before =
            keep_old ? lt::astype(w, lt::float32).to_vector<float>() : std::vector<float>();
        lt::metrics::reset();
        opt.step();
        if (fused) {
          EXPECT_NE(lt::debug::to_program({w}).find("adamw"), std::string::npos);
        }
        lt::sync();
        if (run == 0) {
          EXPECT_GE(lt::metrics::counter("DonatedBuffers"), 3);  // p, m and v at least
        }
        if (keep_old) {
          EXPECT_EQ(lt::astype(old, lt::float32).to_vector<float>(), before);
        }
      }
      result.push_back(lt::astype(w, lt::float32).to_vector<float>());
    }
    ASSERT_EQ(result[0].size(), static_cast<size_t>(n));
    for (int run = 1; run < 3; ++run) {
      int differ = 0;
      for (int64_t i = 0; i < n; ++i)
        differ += result[0][i] != result[run][i] &&
                  !(std::isnan(result[0][i]) && std::isnan(result[run][i]));
      EXPECT_EQ(differ, 0) << lt::dtype_name(dt) << " run " << run;
    }
    EXPECT_NE(result[0], lt::astype(init, lt::float32).to_vector<float>());
  }
}

// A gradient that is a product with a short reduction (a weight's gradient over few tokens:
// stacked, as scan hands it over, or one weight's, transposed, as autograd writes it) is
// computed by the update itself, a block of rows at a time: the program has no separate
// product, and the parameter matches the update of the same gradient computed first, and
// the update op by op, over steps (sizes with row and column tails; several blocks); with
// the old weight held, the same bits.
TEST(Optim, AdamWComputesAProductGradientBesideTheUpdate) {
  const int64_t tokens = 5, rows = 301, cols = 70;
  for (bool stacked : {true, false}) {
    lt::manual_seed(12);
    const lt::Shape shape = stacked ? lt::Shape{3, rows, cols} : lt::Shape{rows, cols};
    Tensor init = lt::randn(shape);
    std::vector<std::pair<Tensor, Tensor>> factors;
    for (int s = 0; s < 3; ++s)
      factors.emplace_back(stacked ? lt::randn({3, tokens, rows}) : lt::randn({tokens, cols}),
                           stacked ? lt::randn({3, tokens, cols}) : lt::randn({tokens, rows}));
    lt::sync();
    std::vector<std::vector<float>> result;
    // product in the update; gradient first; op by op; product in the update with the old
    // weight held (its moments updated in place, the weight into a new buffer)
    for (int run = 0; run < 4; ++run) {
      Tensor w = lt::clone(init).requires_grad_();
      lt::optim::AdamW opt({w}, {.lr = 0.01, .weight_decay = 0.1, .fused = run != 2});
      for (const auto& [a, b] : factors) {
        // stacked: aᵀ b per layer; a weight: (xᵀ dy)ᵀ, x = a [tokens, in], dy = b [tokens, out]
        Tensor g = stacked ? lt::matmul(lt::transpose(a, -1, -2), b)
                           : lt::transpose(lt::matmul(lt::transpose(a), b));
        if (run == 1) lt::sync({g});
        w.set_grad(g);
        g = Tensor();
        const Tensor old = run == 3 ? w.detach() : Tensor();
        const std::vector<float> before = run == 3 ? w.to_vector<float>() : std::vector<float>();
        opt.step();
        opt.zero_grad();
        const std::string plan = lt::debug::to_program({w});
        if (run == 0 || run == 3) {
          EXPECT_EQ(plan.find("matmul"), std::string::npos) << plan;
          EXPECT_NE(plan.find("adamw"), std::string::npos) << plan;
        } else {
          EXPECT_NE(plan.find(run == 1 ? "adamw" : "matmul"), std::string::npos) << plan;
        }
        lt::sync();
        if (run == 3) {
          EXPECT_EQ(old.to_vector<float>(), before);
        }
      }
      result.push_back(w.to_vector<float>());
    }
    EXPECT_EQ(result[3], result[0]) << "the same loop, the same bits";
    for (int run = 1; run < 3; ++run)
      for (size_t i = 0; i < result[0].size(); ++i)
        ASSERT_NEAR(result[0][i], result[run][i], 1e-6)
            << (stacked ? "stacked" : "2-d") << " run " << run << " element " << i;
    EXPECT_NE(result[0], init.to_vector<float>());
  }
}

// state() and load_state() resume a run: a second optimizer over copies of the weights,
// loaded with the first's state after 3 steps, takes the same 2 next steps bit for bit, host
// steps and a step compiled before the load alike. SGD's momentum too.
TEST(Optim, LoadStateResumesTheRunBitForBit) {
  auto grads_at = [](int s, const std::vector<Tensor>& ps) {
    Tensor loss = lt::sum(lt::tanh(ps[0] * static_cast<float>(s + 1)) * ps[1]);
    loss.backward();
  };
  for (int kind : {0, 1}) {  // AdamW, SGD with momentum
    auto make = [kind](std::vector<Tensor> ps) -> std::unique_ptr<lt::optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<lt::optim::AdamW>(ps, lt::optim::AdamWOptions{.lr = 0.1});
      return std::make_unique<lt::optim::SGD>(ps,
                                              lt::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    };
    std::vector<Tensor> a = {random_tensor({3, 2}, 1).requires_grad_(),
                             random_tensor({2}, 2).requires_grad_()};
    auto opt_a = make(a);
    auto step = [&](std::vector<Tensor>& ps, lt::optim::Optimizer& opt, int s) {
      grads_at(s, ps);
      opt.step();
      opt.zero_grad();
      lt::sync();
    };
    for (int s = 0; s < 3; ++s) step(a, *opt_a, s);
    const std::vector<lt::optim::Optimizer::State> saved = opt_a->state();
    ASSERT_EQ(saved.size(), 2u);
    EXPECT_EQ(saved[0].at("step").item<double>(), 3);
    EXPECT_EQ(saved[0].size(), kind == 0 ? 3u : 2u);
    std::vector<Tensor> b = {lt::clone(a[0]).detach().requires_grad_(),
                             lt::clone(a[1]).detach().requires_grad_()};
    auto opt_b = make(b);
    auto compiled = lt::compile([&](const Tensor& s) {
      Tensor loss = lt::sum(lt::tanh(b[0] * s) * b[1]);
      loss.backward();
      opt_b->step();
      opt_b->zero_grad();
      return loss;
    });
    (void)compiled(lt::scalar(9.0f)).item<float>();  // traced and run before the load
    opt_b->load_state(saved);
    {
      lt::NoGradGuard no_grad;  // back to the weights after step 3
      b[0].copy_(lt::clone(a[0]));
      b[1].copy_(lt::clone(a[1]));
    }
    for (int s = 3; s < 5; ++s) {
      step(a, *opt_a, s);
      (void)compiled(lt::scalar(static_cast<float>(s + 1))).item<float>();
      EXPECT_EQ(b[0].to_vector<float>(), a[0].to_vector<float>()) << kind << " step " << s;
      EXPECT_EQ(b[1].to_vector<float>(), a[1].to_vector<float>()) << kind << " step " << s;
    }
    EXPECT_EQ(opt_b->state()[1].at("step").item<double>(), 5);
    // the saved copies did not move with the optimizer
    EXPECT_EQ(saved[0].at("step").item<double>(), 3);
  }
  Tensor w = lt::ones({2}).requires_grad_(), u = lt::ones({3}).requires_grad_();
  lt::optim::AdamW opt({w, u});
  std::vector<lt::optim::Optimizer::State> st = opt.state();
  expect_error([&] { opt.load_state({st[0]}); },
               "[AdamW] load_state got the state of 1 parameters for 2");
  auto wrong = st;
  wrong[1]["exp_avg"] = lt::zeros({2});
  expect_error([&] { opt.load_state(wrong); },
               "[AdamW] load_state: parameter 1's 'exp_avg' is f32[2] where the optimizer holds "
               "f32[3]");
  wrong = st;
  wrong[0]["step"] = lt::scalar(2.0);
  wrong[1]["step"] = lt::scalar(4.0);
  expect_error([&] { opt.load_state(wrong); },
               "parameters updated together share one count, but parameter 1 loads step 4");
  {  // a frozen parameter's step 0 beside an updated one's: the optimizer's state holds both
    Tensor frozen = lt::ones({3});
    lt::optim::AdamW with_frozen({w, frozen}, {.lr = 0.1});
    lt::sum(w * w).backward();
    with_frozen.step();
    const auto saved = with_frozen.state();
    EXPECT_EQ(saved[0].at("step").item<double>(), 1);
    EXPECT_EQ(saved[1].at("step").item<double>(), 0);
    lt::optim::AdamW again({w, frozen}, {.lr = 0.1});
    again.load_state(saved);
    EXPECT_EQ(again.state()[0].at("step").item<double>(), 1);
  }
  wrong = st;
  wrong[0].erase("exp_avg_sq");
  expect_error([&] { opt.load_state(wrong); }, "parameter 0's state has no 'exp_avg_sq'");
  lt::optim::SGD sgd({w, u}, {.lr = 0.1});
  expect_error([&] { sgd.load_state(st); },
               "[SGD] load_state: parameter 0's state has 3 entries where SGD keeps 1");
}

TEST(Optim, AdamWUpdateErrors) {
  Tensor p = lt::zeros({3}), g = lt::zeros({3}), m = lt::zeros({3}), v = lt::zeros({3});
  Tensor one = lt::full({}, 1.0);
  expect_error([&] { lt::adamw_update(p, lt::zeros({4}), m, v, one, one, one, 0.9, 0.99, 1e-8); },
               "[adamw_update] grad must match the parameter f32[3], got f32[4]");
  expect_error(
      [&] {
        lt::adamw_update(p, g, lt::zeros({3}, lt::float64), v, one, one, one, 0.9, 0.99, 1e-8);
      },
      "[adamw_update] exp_avg must match the parameter f32[3], got f64[3]");
  expect_error([&] { lt::adamw_update(p, g, m, v, lt::ones({1}), one, one, 0.9, 0.99, 1e-8); },
               "[adamw_update] decay must be a 0-d floating tensor, got f32[1]");
  Tensor i = lt::zeros({3}, lt::int64);
  expect_error([&] { lt::adamw_update(i, i, i, i, one, one, one, 0.9, 0.99, 1e-8); },
               "[adamw_update] needs a floating parameter, got i64[3]");
  Tensor w = lt::zeros({3}).requires_grad_();
  expect_error([&] { lt::adamw_update(w, g, m, v, one, one, one, 0.9, 0.99, 1e-8); },
               "[adamw_update] is not differentiable: call it under lt::NoGradGuard");
}

TEST(Optim, Errors) {
  Tensor leaf = lt::ones({2}).requires_grad_();
  expect_error([&] { lt::optim::AdamW({leaf * 2}); },
               "[AdamW] parameter 0 (f32[2]) is computed from other tensors (not a leaf)");
  expect_error([] { lt::optim::AdamW({lt::ones({2}, lt::int64)}); },
               "[AdamW] parameter 0 (i64[2]) is not floating");
  {  // a frozen parameter is taken and left alone, as torch's
    Tensor frozen = lt::ones({2});
    lt::optim::AdamW opt({leaf, frozen}, {.lr = 0.5});
    lt::sum(leaf * frozen).backward();
    opt.step();
    EXPECT_EQ(frozen.to_vector<float>(), (std::vector<float>{1, 1}));
    EXPECT_NE(leaf.to_vector<float>(), (std::vector<float>{1, 1}));
  }
  Tensor w = lt::ones({2}).requires_grad_();
  expect_error(
      [&] {
        lt::optim::SGD({w, w});
      },
      "[SGD] parameter 1 is the same tensor as parameter 0");
  expect_error([&] { lt::optim::SGD({w}, {.lr = -1}); }, "[SGD] lr must be in [0, inf]");
  expect_error([&] { lt::optim::AdamW({w}, {.beta1 = 1.0}); }, "[AdamW] beta1 must be in [0, ");
  expect_error([&] { lt::optim::SGD({w}, {.nesterov = true}); }, "nesterov momentum needs");
  expect_error([] { lt::optim::SGD({}); }, "[SGD] got an empty parameter list");
}

// ---- training

std::string gpl3_text() {
  std::ifstream f("/usr/share/common-licenses/GPL-3", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(Training, DecoderLearnsGplTextAndEveryStepAfterTheFirstIsACacheHit) {
  const std::string text = gpl3_text();
  ASSERT_GT(text.size(), 30000u) << "GPL-3 text missing: /usr/share/common-licenses/GPL-3";
  lt::manual_seed(0);
  auto model = std::make_shared<nn::DecoderLM>(nn::DecoderConfig{.vocab = 256,
                                                                 .hidden = 128,
                                                                 .intermediate = 512,
                                                                 .heads = 4,
                                                                 .kv_heads = 2,
                                                                 .layers = 4,
                                                                 .max_seq = 64});
  lt::optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  const int64_t batch = 4, seq = 48;
  std::mt19937_64 rng(1);
  double first_loss = 0, best = 1e9;
  int64_t compiles_after_first = -1;
  int step = 0;
  for (; step < 200; ++step) {
    std::vector<int64_t> tokens(static_cast<size_t>(batch * (seq + 1)));
    for (int64_t b = 0; b < batch; ++b) {
      const size_t start = rng() % (text.size() - seq - 1);
      for (int64_t t = 0; t <= seq; ++t)
        tokens[b * (seq + 1) + t] = static_cast<unsigned char>(text[start + t]);
    }
    Tensor data = lt::tensor(tokens, {batch, seq + 1});
    Tensor loss =
        nn::cross_entropy((*model)(lt::slice(data, 1, 0, seq)), lt::slice(data, 1, 1, seq + 1));
    loss.backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
    const double l = loss.item<float>();
    if (step == 0) {
      first_loss = l;
      compiles_after_first = lt::metrics::counter("CompileCount");
    }
    EXPECT_EQ(lt::metrics::counter("CompileCount"), compiles_after_first) << "step " << step;
    best = std::min(best, l);
    if (step >= 30 && first_loss - best >= 1.0) break;  // shown: stop early to keep the test fast
  }
  EXPECT_NEAR(first_loss, std::log(256.0), 0.5);
  EXPECT_GE(first_loss - best, 1.0) << "after " << step << " steps";
  EXPECT_LT(step, 200);
}

}  // namespace
