// scan_layers: layers of one structure run as a scan over stacked weights, against the
// plain loop over the same layers (outputs and every layer's gradients), and its errors.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <algorithm>
#include <cmath>
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
  lt::manual_seed(seed);
  return lt::randn(shape);
}

// Each element within rel of its reference, or within `floor` times the reference's largest
// element (float32 sums in another order differ by about 1e-7 of the largest term).
void expect_close(const Tensor& a, const Tensor& b, double floor, double rel,
                  const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double largest = 0;
  for (double v : y) largest = std::max(largest, std::fabs(v));
  ASSERT_GT(largest, 0) << what << ": a reference of zeros checks nothing";
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], floor * largest + rel * std::fabs(y[i])) << what << " element " << i;
}

// Gradients of every parameter of `layers`, after backward of `loss`.
std::vector<Tensor> grads_of(const std::vector<std::shared_ptr<nn::Linear>>& layers) {
  std::vector<Tensor> out;
  for (const auto& l : layers) {
    out.push_back(l->weight.grad());
    out.push_back(l->bias.grad());
  }
  return out;
}

TEST(ScanLayers, TenLinearLayersMatchThePlainLoop) {
  lt::manual_seed(1);
  std::vector<std::shared_ptr<nn::Linear>> layers;
  for (int i = 0; i < 10; ++i) layers.push_back(std::make_shared<nn::Linear>(64, 64));
  Tensor x = random_tensor({4, 64}, 2);
  x.requires_grad_();

  Tensor plain = x;
  for (const auto& l : layers) plain = (*l)(plain);
  lt::sum(plain * plain).backward();
  std::vector<Tensor> ref_grads = grads_of(layers);
  Tensor ref_gx = x.grad();

  for (lt::Remat remat : {lt::Remat::save, lt::Remat::recompute}) {
    for (const auto& l : layers) l->zero_grad();
    x.set_grad({});
    Tensor out = nn::scan_layers(layers, x, {.remat = remat});
    expect_close(out, plain, 1e-5, 1e-4, "output");
    lt::sum(out * out).backward();
    std::vector<Tensor> g = grads_of(layers);
    for (size_t i = 0; i < g.size(); ++i)
      expect_close(g[i], ref_grads[i], 1e-5, 1e-4,
                   "layer " + std::to_string(i / 2) + (i % 2 ? " bias" : " weight"));
    expect_close(x.grad(), ref_gx, 1e-5, 1e-4, "input gradient");
  }
}

TEST(ScanLayers, DecoderLayersMatchTheUnrolledModel) {
  nn::DecoderConfig cfg = tiny_decoder_config();
  cfg.layers = 4;
  lt::manual_seed(3);
  auto model = std::make_shared<nn::DecoderLM>(cfg);
  auto [x, y] = tiny_batch();
  std::vector<std::vector<float>> logits, grads;
  for (auto mode : {nn::LayersMode::loop, nn::LayersMode::scan, nn::LayersMode::assume_pure}) {
    for (lt::Remat remat : {lt::Remat::save, lt::Remat::recompute}) {
      if (mode != nn::LayersMode::scan && remat == lt::Remat::recompute) continue;
      model->layers_mode = mode;
      model->scan_options.remat = remat;
      model->zero_grad();
      Tensor out = (*model)(x);
      nn::cross_entropy(out, y).backward();
      logits.push_back(out.to_vector<float>());
      std::vector<float> g;
      for (const Tensor& p : model->parameters())
        for (float v : p.grad().to_vector<float>()) g.push_back(v);
      grads.push_back(g);
    }
  }
  ASSERT_EQ(logits.size(), 4u);
  float largest = 0;
  for (float v : grads[0]) largest = std::max(largest, std::fabs(v));
  for (size_t k = 1; k < logits.size(); ++k) {
    for (size_t i = 0; i < logits[0].size(); ++i)
      ASSERT_NEAR(logits[k][i], logits[0][i], 1e-5 + 1e-5 * std::fabs(logits[0][i])) << k;
    for (size_t i = 0; i < grads[0].size(); ++i)
      ASSERT_NEAR(grads[k][i], grads[0][i], 1e-5 * largest + 1e-4 * std::fabs(grads[0][i]))
          << k << " " << i;
  }
}

TEST(ScanLayers, CompiledTrainingStepWithScannedLayersTrainsLikeTheLoop) {
  nn::DecoderConfig cfg = tiny_decoder_config();
  cfg.layers = 3;
  auto [x, y] = tiny_batch();
  std::vector<std::vector<float>> losses(2);
  for (int scanned = 0; scanned < 2; ++scanned) {
    lt::manual_seed(5);
    auto model = std::make_shared<nn::DecoderLM>(cfg);
    if (scanned) model->layers_mode = nn::LayersMode::scan;
    lt::optim::AdamW opt(model->parameters(), {.lr = 0.05});
    auto step = lt::compile(
        [&](const Tensor& tokens, const Tensor& targets) {
          Tensor loss = nn::cross_entropy((*model)(tokens), targets);
          loss.backward();
          opt.step();
          opt.zero_grad();
          return loss;
        },
        {.full_graph = true, .name = "train"});
    const int64_t compiles = counter("CompileCount[train]");
    for (int i = 0; i < 4; ++i)
      losses[static_cast<size_t>(scanned)].push_back(step(x, y).item<float>());
    EXPECT_EQ(counter("CompileCount[train]") - compiles, 1);
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4) << i;
  EXPECT_LT(losses[1].back(), losses[1].front());
}

TEST(ScanLayers, StackedDecoderWeightsMatchTheUnstackedModel) {
  nn::DecoderConfig cfg = tiny_decoder_config();
  cfg.layers = 3;
  nn::DecoderConfig stacked_cfg = cfg;
  stacked_cfg.stacked_layers = true;
  lt::manual_seed(11);
  auto plain = std::make_shared<nn::DecoderLM>(cfg);
  lt::manual_seed(11);
  auto stacked = std::make_shared<nn::DecoderLM>(stacked_cfg);
  EXPECT_EQ(stacked->layers, nullptr);
  const nn::ParamMap sp = stacked->named_parameters();
  ASSERT_TRUE(sp.contains("layers.attn.q_proj.weight"));
  EXPECT_EQ(sp.at("layers.attn.q_proj.weight").shape(), lt::Shape({3, 8, 8}));
  EXPECT_EQ(sp.size() + 2 * 9, plain->named_parameters().size());  // 9 per layer, once

  auto [x, y] = tiny_batch();
  nn::cross_entropy((*plain)(x), y).backward();
  const nn::ParamMap pp = plain->named_parameters();
  for (auto mode : {nn::LayersMode::scan, nn::LayersMode::loop, nn::LayersMode::assume_pure}) {
    stacked->layers_mode = mode;
    stacked->zero_grad();
    Tensor logits = (*stacked)(x);
    expect_close(logits, (*plain)(x), 1e-5, 1e-5, "logits");
    nn::cross_entropy(logits, y).backward();
    for (const auto& [name, t] : sp) {
      if (name.rfind("layers.", 0) != 0) {
        expect_close(t.grad(), pp.at(name).grad(), 1e-5, 1e-4, name);
        continue;
      }
      for (int64_t i = 0; i < 3; ++i) {
        const std::string own = "layers." + std::to_string(i) + name.substr(6);
        expect_close(lt::select(t.grad(), 0, i), pp.at(own).grad(), 1e-5, 1e-4, own);
      }
    }
  }
}

// to(float64) on a model that keeps its layers stacked converts the module that runs one
// layer's weights too (it threw in every mode), and gives the float32 model's logits.
TEST(ScanLayers, StackedDecoderConvertsToAnotherDtype) {
  nn::DecoderConfig cfg = tiny_decoder_config();
  cfg.layers = 2;
  cfg.stacked_layers = true;
  lt::manual_seed(12);
  auto model = std::make_shared<nn::DecoderLM>(cfg);
  auto [x, y] = tiny_batch();
  const Tensor f32 = (*model)(x);
  // converted through a module that holds it: to() reaches each child's own to()
  struct Holder : nn::Module {
    std::shared_ptr<nn::DecoderLM> lm;
    explicit Holder(std::shared_ptr<nn::DecoderLM> m) : lm(register_module("lm", std::move(m))) {}
    std::string name() const override { return "Holder"; }
  };
  Holder holder(model);
  holder.to(lt::float64);
  for (auto mode : {nn::LayersMode::scan, nn::LayersMode::loop, nn::LayersMode::assume_pure}) {
    model->layers_mode = mode;
    const Tensor f64 = (*model)(x);
    EXPECT_EQ(f64.dtype(), lt::float64);
    expect_close(lt::astype(f64, lt::float32), f32, 1e-4, 1e-4, "float64 logits");
  }
}

TEST(ScanLayers, PerLayerParametersMoveBetweenStackedAndUnstackedModels) {
  nn::DecoderConfig cfg = tiny_decoder_config();
  cfg.layers = 3;
  lt::manual_seed(13);
  auto plain = std::make_shared<nn::DecoderLM>(cfg);
  nn::DecoderConfig scfg = cfg;
  scfg.stacked_layers = true;
  lt::manual_seed(99);  // other weights, replaced below
  auto stacked = std::make_shared<nn::DecoderLM>(scfg);
  const nn::ParamMap own = plain->named_parameters();
  nn::load_per_layer_parameters(*stacked, nn::per_layer_parameters(*plain));
  const nn::ParamMap back = nn::per_layer_parameters(*stacked);
  ASSERT_EQ(back.size(), own.size());
  for (const auto& [name, t] : own) expect_close(back.at(name), t, 0, 0, name);
  stacked->layers_mode = nn::LayersMode::scan;
  auto [x, y] = tiny_batch();
  expect_close((*stacked)(x), (*plain)(x), 1e-5, 1e-5, "logits");
  EXPECT_TRUE(stacked->named_parameters().at("layers.mlp.up_proj.weight").requires_grad());

  nn::ParamMap missing = own, wrong = own, extra = own;
  missing = {};
  for (const auto& [name, t] : own)
    if (name != "layers.2.mlp.up_proj.weight") missing.insert(name, t);
  wrong["layers.1.attn.q_proj.weight"] = lt::zeros({8, 7});
  extra.insert("layers.9.attn.q_proj.weight", lt::zeros({8, 8}));
  expect_error([&] { nn::load_per_layer_parameters(*stacked, missing); },
               {"[load_per_layer_parameters]", "no tensor named 'layers.2.mlp.up_proj.weight'"});
  expect_error(
      [&] { nn::load_per_layer_parameters(*stacked, wrong); },
      {"[load_per_layer_parameters]", "'layers.1.attn.q_proj.weight' is f32[8, 7]", "f32[8, 8]"});
  expect_error([&] { nn::load_per_layer_parameters(*plain, extra); },
               {"[load_per_layer_parameters]", "'layers.9.attn.q_proj.weight'", "not a parameter"});
}

TEST(ScanLayers, StackedTrainingStepGraphDoesNotGrowWithDepth) {
  // the compiled step's graph, optimizer included, has the same size for 2 and 6 layers
  auto [x, y] = tiny_batch();
  std::vector<float> first_losses;
  std::vector<size_t> nodes;
  for (int64_t depth : {2, 6}) {
    nn::DecoderConfig cfg = tiny_decoder_config();
    cfg.layers = depth;
    cfg.stacked_layers = true;
    lt::manual_seed(12);
    auto model = std::make_shared<nn::DecoderLM>(cfg);
    model->layers_mode = nn::LayersMode::scan;
    lt::optim::AdamW opt(model->parameters(), {.lr = 0.05});
    Tensor loss = nn::cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    std::vector<Tensor> roots{loss};
    for (const Tensor& p : model->parameters()) roots.push_back(p);
    const std::string text = lt::debug::to_text(roots);
    nodes.push_back(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')));
    lt::sync();
  }
  EXPECT_GT(nodes[0], 50u);
  EXPECT_EQ(nodes[0], nodes[1]);
}

TEST(ScanLayers, IsLayerPureTracesTheLayerOnce) {
  lt::manual_seed(6);
  std::vector<std::shared_ptr<nn::Linear>> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(std::make_shared<nn::Linear>(8, 8));
  Tensor x = random_tensor({2, 8}, 7);
  const int64_t traces = counter("LoopTrace"), hits = counter("LoopHit");
  for (int k = 0; k < 3; ++k) {
    Tensor plain = x;
    for (const auto& l : layers) plain = (*l)(plain);
    expect_close(nn::scan_layers(layers, x, {.is_layer_pure = true}), plain, 1e-5, 1e-5, "pure");
    for (const auto& l : layers) {  // new weights: read by the cached body
      Tensor w = l->weight;
      lt::NoGradGuard no_grad;
      w.copy_(w * 0.5);
    }
  }
  EXPECT_EQ(counter("LoopTrace") - traces, 1);
  EXPECT_EQ(counter("LoopHit") - hits, 2);
}

// A layer without weights, one taking and returning a tuple, one with a shared extra input.
class Squash : public nn::Module {
 public:
  Tensor forward(const Tensor& x) const { return lt::tanh(x) * 2.0; }
  std::string name() const override { return "Squash"; }
};

class Mixer : public nn::Module {
 public:
  using Carry = std::tuple<Tensor, Tensor, Tensor>;
  explicit Mixer(int64_t d) : lin(register_module("lin", std::make_shared<nn::Linear>(d, d))) {}
  Carry forward(const Carry& c) const {
    const auto& [a, b, k] = c;
    return {(*lin)(a) + b, b * 0.5 + a, k + 1};
  }
  std::string name() const override { return "Mixer"; }
  std::shared_ptr<nn::Linear> lin;
};

class Masked : public nn::Module {
 public:
  explicit Masked(int64_t d) : lin(register_module("lin", std::make_shared<nn::Linear>(d, d))) {}
  Tensor forward(const Tensor& x, const Tensor& mask) const { return (*lin)(x)*mask; }
  std::string name() const override { return "Masked"; }
  std::shared_ptr<nn::Linear> lin;
};

TEST(ScanLayers, WeightlessTupleAndExtraArgumentLayers) {
  std::vector<std::shared_ptr<Squash>> squash(4, std::make_shared<Squash>());
  Tensor x = random_tensor({3, 5}, 8);
  Tensor plain = x;
  for (const auto& l : squash) plain = l->forward(plain);
  expect_close(nn::scan_layers(squash, x), plain, 1e-6, 1e-6, "weightless");

  lt::manual_seed(9);
  std::vector<std::shared_ptr<Mixer>> mixers;
  for (int i = 0; i < 3; ++i) mixers.push_back(std::make_shared<Mixer>(5));
  Mixer::Carry c{x, random_tensor({3, 5}, 10), lt::tensor({0})};
  Mixer::Carry pc = c;
  for (const auto& m : mixers) pc = m->forward(pc);
  Mixer::Carry sc = nn::scan_layers(mixers, c);
  expect_close(std::get<0>(sc), std::get<0>(pc), 1e-5, 1e-5, "tuple a");
  expect_close(std::get<1>(sc), std::get<1>(pc), 1e-5, 1e-5, "tuple b");
  EXPECT_EQ(std::get<2>(sc).to_vector<int64_t>(), std::vector<int64_t>({3}));

  std::vector<std::shared_ptr<Masked>> masked;
  for (int i = 0; i < 3; ++i) masked.push_back(std::make_shared<Masked>(5));
  Tensor mask = lt::astype(random_tensor({3, 5}, 11) > 0.0, lt::DType::float32);
  mask.requires_grad_();
  Tensor pm = x;
  for (const auto& m : masked) pm = m->forward(pm, mask);
  lt::sum(pm).backward();
  Tensor ref_mask_grad = mask.grad();
  mask.set_grad({});
  Tensor sm = nn::scan_layers(masked, x, {}, mask);
  expect_close(sm, pm, 1e-5, 1e-5, "masked");
  lt::sum(sm).backward();
  expect_close(mask.grad(), ref_mask_grad, 1e-5, 1e-5, "mask gradient");
}

TEST(ScanLayers, EmptyListReturnsTheInput) {
  Tensor x = random_tensor({2, 3}, 12);
  Tensor out = nn::scan_layers(std::vector<std::shared_ptr<nn::Linear>>{}, x);
  EXPECT_EQ(out.impl(), x.impl());
}

TEST(ScanLayersErrors, MismatchedLayersNameTheLayerAndParameter) {
  auto a = std::make_shared<nn::Linear>(4, 4), b = std::make_shared<nn::Linear>(4, 3);
  auto nobias = std::make_shared<nn::Linear>(4, 4, false);
  Tensor x = random_tensor({2, 4}, 13);
  using L = std::vector<std::shared_ptr<nn::Linear>>;
  expect_error(
      [&] {
        nn::scan_layers(L{a, a, b}, x);
      },
      {"[scan_layers]", "layer 2 does not match layer 0", "parameter 'weight' is f32[3, 4]",
       "but f32[4, 4] in layer 0", "plain loop"});
  expect_error(
      [&] {
        nn::scan_layers(L{a, nobias}, x);
      },
      {"[scan_layers]", "layer 1", "has no parameter 'bias'"});
  expect_error(
      [&] {
        nn::scan_layers(L{nobias, a}, x);
      },
      {"[scan_layers]", "layer 1", "extra parameter 'bias'"});
}

TEST(ScanLayersErrors, ModuleListOfAnotherType) {
  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(4, 4));
  list.push_back(std::make_shared<Squash>());
  expect_error([&] { nn::scan_layers<nn::Linear>(list, random_tensor({2, 4}, 14)); }, "ModuleList");
}

}  // namespace
