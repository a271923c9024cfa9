// The decoder-only transformer.
#include "lazytrace/nn/decoder.h"

#include <cmath>
#include <limits>

#include "lazytrace/ops/ops.h"
#include "lazytrace/tools/assume_pure.h"

namespace lazytrace::nn {

void DecoderConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v <= 0) fail("DecoderConfig", field, " must be positive, got ", v, ".");
  };
  positive("vocab", vocab);
  positive("hidden", hidden);
  positive("intermediate", intermediate);
  positive("heads", heads);
  positive("kv_heads", kv_heads);
  positive("layers", layers);
  positive("max_seq", max_seq);
  if (hidden % heads != 0)
    fail("DecoderConfig", "hidden (", hidden, ") must be a multiple of heads (", heads, ").");
  if (heads % kv_heads != 0)
    fail("DecoderConfig", "heads (", heads, ") must be a multiple of kv_heads (", kv_heads,
         ") for grouped-query attention.");
  if (positions == Positions::rotary && head_dim() % 2 != 0)
    fail("DecoderConfig",
         "rotary positions need an even head dim, got hidden / heads = ", head_dim(), ".");
}

Tensor apply_rotary(const Tensor& x, double theta) {
  const int64_t seq = x.size(-2), dim = x.size(-1), half = dim / 2;
  // angle[t, i] = t * theta^(-2i / dim), recorded as ops: no host data per step
  Tensor inv_freq = exp(arange(0, static_cast<double>(half), 1, DType::float32) *
                        (-2 * std::log(theta) / static_cast<double>(dim)));
  Tensor angles =
      unsqueeze(arange(static_cast<double>(seq), DType::float32), 1) * unsqueeze(inv_freq, 0);
  angles = astype(concat({angles, angles}, -1), x.dtype());
  Tensor rotated = concat({-slice(x, -1, half, dim), slice(x, -1, 0, half)}, -1);
  return x * cos(angles) + rotated * sin(angles);
}

CausalSelfAttention::CausalSelfAttention(const DecoderConfig& c) : config(c) {
  config.validate();
  const int64_t kv = c.kv_heads * c.head_dim();
  q_proj = register_module("q_proj", std::make_shared<Linear>(c.hidden, c.hidden, false));
  k_proj = register_module("k_proj", std::make_shared<Linear>(c.hidden, kv, false));
  v_proj = register_module("v_proj", std::make_shared<Linear>(c.hidden, kv, false));
  o_proj = register_module("o_proj", std::make_shared<Linear>(c.hidden, c.hidden, false));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  if (!x.defined() || x.ndim() != 3 || x.size(-1) != config.hidden)
    fail(name(), "input must be [batch, seq, ", config.hidden, "], got ", x.type_str(), ".");
  const int64_t b = x.size(0), t = x.size(1), hd = config.head_dim();
  const int64_t nkv = config.kv_heads, rep = config.heads / config.kv_heads;
  auto heads_first = [&](const Tensor& y, int64_t n) {  // [b, t, n*hd] -> [b, n, t, hd]
    return permute(reshape(y, {b, t, n, hd}), {0, 2, 1, 3});
  };
  Tensor q = heads_first((*q_proj)(x), config.heads);
  Tensor k = heads_first((*k_proj)(x), nkv);
  Tensor v = heads_first((*v_proj)(x), nkv);
  if (config.positions == Positions::rotary) {
    q = apply_rotary(q, config.rope_theta);
    k = apply_rotary(k, config.rope_theta);
  }
  // grouped-query attention: the `rep` query heads of a group share one k/v head, by
  // broadcasting k and v over a group dim instead of copying them
  Tensor q5 = reshape(q, {b, nkv, rep, t, hd});
  Tensor k5 = unsqueeze(k, 2), v5 = unsqueeze(v, 2);
  Tensor scores = matmul(q5, transpose(k5)) * (1 / std::sqrt(static_cast<double>(hd)));
  Tensor causal =
      unsqueeze(arange(static_cast<double>(t)), 1) >= unsqueeze(arange(static_cast<double>(t)), 0);
  scores = where(causal, scores, -std::numeric_limits<double>::infinity());
  Tensor out = matmul(softmax(scores, -1), v5);  // [b, nkv, rep, t, hd]
  out =
      reshape(permute(reshape(out, {b, config.heads, t, hd}), {0, 2, 1, 3}), {b, t, config.hidden});
  return (*o_proj)(out);
}

GatedMLP::GatedMLP(const DecoderConfig& c) {
  gate_proj =
      register_module("gate_proj", std::make_shared<Linear>(c.hidden, c.intermediate, false));
  up_proj = register_module("up_proj", std::make_shared<Linear>(c.hidden, c.intermediate, false));
  down_proj =
      register_module("down_proj", std::make_shared<Linear>(c.intermediate, c.hidden, false));
}

Tensor GatedMLP::forward(const Tensor& x) const {
  return (*down_proj)(silu((*gate_proj)(x)) * (*up_proj)(x));
}

DecoderLayer::DecoderLayer(const DecoderConfig& c) {
  c.validate();
  attn_norm = register_module("attn_norm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  mlp_norm = register_module("mlp_norm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps));
  mlp = register_module("mlp", std::make_shared<GatedMLP>(c));
}

Tensor DecoderLayer::forward(const Tensor& x) const {
  Tensor h = x + (*attn)((*attn_norm)(x));
  return h + (*mlp)((*mlp_norm)(h));
}

DecoderLM::DecoderLM(const DecoderConfig& c) : config(c) {
  config.validate();
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, c.hidden));
  if (c.positions == Positions::learned)
    pos_embed = register_module("pos_embed", std::make_shared<Embedding>(c.max_seq, c.hidden));
  std::vector<std::shared_ptr<DecoderLayer>> made;
  for (int64_t i = 0; i < c.layers; ++i) made.push_back(std::make_shared<DecoderLayer>(c));
  if (c.stacked_layers) {
    std::vector<const Module*> mods;
    for (const auto& l : made) mods.push_back(l.get());
    stack_layers_into(*made[0], mods);  // the first layer's slots now hold the stacks
    stacked = register_module("layers", made[0]);
  } else {
    layers = register_module("layers", std::make_shared<ModuleList>());
    for (const auto& l : made) layers->push_back(l);
  }
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps));
  head = register_module("head", std::make_shared<Linear>(c.hidden, c.vocab, false));
  // stacked: a module of one layer's shapes to run each slice (made last, so the weights
  // above are drawn as an unstacked model's are)
  layer_ = c.stacked_layers ? std::make_shared<DecoderLayer>(c) : made[0];
}

void DecoderLM::to(DType dtype) {
  Module::to(dtype);
  if (config.stacked_layers) layer_->to(dtype);  // not registered: a template of one layer
  pure_layer_ = nullptr;                         // traced on the old dtype's template
}

Tensor DecoderLM::forward(const Tensor& tokens) const {
  if (!tokens.defined() || tokens.ndim() != 2 ||
      (tokens.dtype() != DType::int32 && tokens.dtype() != DType::int64))
    fail(name(), "tokens must be int32 or int64 [batch, seq], got ", tokens.type_str(), ".");
  const int64_t t = tokens.size(1);
  if (t > config.max_seq)
    fail(name(), "a sequence of ", t, " tokens is longer than max_seq = ", config.max_seq,
         "; shorten it or raise DecoderConfig::max_seq.");
  Tensor h = (*embed)(tokens);
  if (pos_embed) h = h + (*pos_embed)(arange(static_cast<double>(t)));
  return (*head)((*norm)(run_layers(h)));
}

Tensor DecoderLM::run_layers(const Tensor& x) const {
  if (config.layers == 0) return x;
  if (layers_mode == LayersMode::scan)
    return stacked ? scan_stacked(layer_, *stacked, x, scan_options)
                   : scan_layers<DecoderLayer>(*layers, x, scan_options);
  // one call per layer, on its own weights (stacked: slice i of each stack)
  const ParamMap sp = stacked ? stacked->named_parameters() : ParamMap{};
  const ParamMap sb = stacked ? stacked->named_buffers() : ParamMap{};
  auto weights = [&](int64_t i) {
    if (!stacked) {
      const auto& l = (*layers)[static_cast<size_t>(i)];
      return std::pair{l->named_parameters(), l->named_buffers()};
    }
    std::pair<ParamMap, ParamMap> w;
    for (const auto& [n, t] : sp) w.first.insert(n, select(t, 0, i));
    for (const auto& [n, t] : sb) w.second.insert(n, select(t, 0, i));
    return w;
  };
  if (layers_mode == LayersMode::assume_pure && !pure_layer_) {
    pure_layer_ =
        assume_pure([l = layer_](const ParamMap& p, const ParamMap& b,
                                 const Tensor& in) { return functional_call(*l, p, b, in); },
                    "decoder_layer");
  }
  Tensor h = x;
  for (int64_t i = 0; i < config.layers; ++i) {
    if (!stacked && layers_mode == LayersMode::loop) {
      h = (*layers).at<DecoderLayer>(static_cast<size_t>(i))->forward(h);
      continue;
    }
    auto [p, b] = weights(i);
    h = layers_mode == LayersMode::assume_pure ? pure_layer_(p, b, h)
                                               : functional_call(*layer_, p, b, h);
  }
  return h;
}

namespace {
// "layers.attn.x" of a stacked model -> "layers.<i>.attn.x"
std::string layer_name(const std::string& stacked_name, int64_t i) {
  std::string n = "layers.";
  n.append(std::to_string(i)).append(stacked_name.substr(6));
  return n;
}
bool in_layers(const std::string& name) {
  return name.rfind("layers.", 0) == 0;
}
}  // namespace

ParamMap per_layer_parameters(const DecoderLM& model) {
  ParamMap out;
  for (const auto& [name, t] : model.named_parameters()) {
    if (!model.stacked || !in_layers(name)) {
      out.insert(name, t);
      continue;
    }
    for (int64_t i = 0; i < model.config.layers; ++i)
      out.insert(layer_name(name, i), select(t, 0, i));
  }
  return out;
}

void load_per_layer_parameters(DecoderLM& model, const ParamMap& tensors) {
  const char* op = "load_per_layer_parameters";
  size_t used = 0;
  auto take = [&](const std::string& name, const Tensor& like) {
    const Tensor* t = tensors.find(name);
    if (!t) fail(op, "no tensor named '", name, "' (", like.type_str(), " in the model).");
    if (t->shape() != like.shape())
      fail(op, "'", name, "' is ", t->type_str(), " but the model's is ", like.type_str(),
           "; the file holds a model of another shape.");
    if (is_floating(t->dtype()) != is_floating(like.dtype()))
      fail(op, "'", name, "' is ", t->type_str(), " but the model's is ", like.type_str(),
           "; a weight must be a floating tensor (the file was not saved from this model).");
    ++used;
    return is_floating(t->dtype()) && t->dtype() != like.dtype() ? astype(*t, like.dtype()) : *t;
  };
  ParamMap params;
  for (const auto& [name, t] : model.named_parameters()) {
    if (!model.stacked || !in_layers(name)) {
      params.insert(name, take(name, t));
      continue;
    }
    const Tensor one = select(t, 0, 0);
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < model.config.layers; ++i)
      parts.push_back(take(layer_name(name, i), one));
    params.insert(name, stack(parts));
  }
  if (used != tensors.size())
    for (const auto& [name, t] : tensors)
      if (!per_layer_parameters(model).contains(name))
        fail(op, "'", name, "' (", t.type_str(), ") is not a parameter of the model.");
  std::vector<Tensor> all = params.values();
  sync(all);
  model.replace_tensors(params, {});
}

}  // namespace lazytrace::nn
