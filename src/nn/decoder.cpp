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
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) layers->push_back(std::make_shared<DecoderLayer>(c));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden, c.norm_eps));
  head = register_module("head", std::make_shared<Linear>(c.hidden, c.vocab, false));
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
  Tensor h = x;
  switch (layers_mode) {
    case LayersMode::loop:
      for (const auto& layer : *layers) h = std::static_pointer_cast<DecoderLayer>(layer)->forward(h);
      return h;
    case LayersMode::assume_pure:
      if (layers->empty()) return h;
      if (!pure_layer_) {
        auto first = layers->at<DecoderLayer>(0);
        auto pure = assume_pure(
            [first](const ParamMap& p, const Tensor& in) { return functional_call(*first, p, {}, in); },
            "decoder_layer");
        pure_layer_ = pure;
      }
      for (const auto& layer : *layers) h = pure_layer_(layer->named_parameters(), h);
      return h;
    case LayersMode::scan:
      return scan_layers<DecoderLayer>(*layers, h, scan_options);
  }
  return h;
}

}  // namespace lazytrace::nn
