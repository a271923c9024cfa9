#pragma once
/**
 * A decoder-only transformer (Llama's shape): pre-norm layers of causal multi-head
 * attention with grouped-query heads and rotary or learned positions, and a SiLU-gated
 * MLP, with residual connections.
 */
#include <cstdint>
#include <functional>
#include <memory>

#include "lazytrace/nn/layers.h"
#include "lazytrace/nn/scan_layers.h"

namespace lazytrace::nn {

enum class Positions { rotary, learned };

struct DecoderConfig {
  int64_t vocab = 256;
  int64_t hidden = 128;
  int64_t intermediate = 512;
  int64_t heads = 4;
  int64_t kv_heads = 4;  // fewer than heads: grouped-query attention
  int64_t layers = 4;
  int64_t max_seq = 256;
  Positions positions = Positions::rotary;
  double rope_theta = 10000;
  double norm_eps = 1e-6;
  // Keep the layers' weights stacked, [layers, ...] per name ("layers.attn.q_proj.weight"),
  // as flax's nn.scan does: a training step's graph, optimizer included, then does not grow
  // with depth. The weights start equal to an unstacked model's of the same seed.
  bool stacked_layers = false;
  int64_t head_dim() const { return hidden / heads; }
  /** Throws lt::Error naming the first inconsistent field. */
  void validate() const;
};

/** Causal self-attention over x [batch, seq, hidden]; q/k/v/o projections without bias. */
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const DecoderConfig& config);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "CausalSelfAttention"; }

  DecoderConfig config;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
};

/** down_proj(silu(gate_proj(x)) * up_proj(x)). */
class GatedMLP : public Module {
 public:
  explicit GatedMLP(const DecoderConfig& config);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "GatedMLP"; }

  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
};

/** x + attn(attn_norm(x)), then h + mlp(mlp_norm(h)). */
class DecoderLayer : public Module {
 public:
  explicit DecoderLayer(const DecoderConfig& config);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "DecoderLayer"; }

  std::shared_ptr<RMSNorm> attn_norm, mlp_norm;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GatedMLP> mlp;
};

/**
 * How DecoderLM runs its layers: a plain loop (every layer traced op by op), each layer
 * through assume_pure (one call node per layer, the layer traced once), or scan_layers
 * (one loop node, the layer traced and compiled once).
 */
enum class LayersMode { loop, assume_pure, scan };

/** Token ids [batch, seq] (int32/int64) to next-token logits [batch, seq, vocab]. */
class DecoderLM : public Module {
 public:
  explicit DecoderLM(const DecoderConfig& config);
  Tensor forward(const Tensor& tokens) const;
  /** The layers on hidden states [batch, seq, hidden], as layers_mode says. */
  Tensor run_layers(const Tensor& h) const;
  Tensor operator()(const Tensor& tokens) const { return forward(tokens); }
  std::string name() const override { return "DecoderLM"; }
  /** Module::to, and the module that runs one layer's weights (stacked_layers) with them. */
  void to(DType dtype) override;

  DecoderConfig config;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<Embedding> pos_embed;   // learned positions only
  std::shared_ptr<ModuleList> layers;     // one module per layer (null if stacked)
  std::shared_ptr<DecoderLayer> stacked;  // stacked_layers: every layer's weights, [layers, ...]
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> head;
  LayersMode layers_mode = LayersMode::loop;
  ScanLayersOptions scan_options{};  // LayersMode::scan

 private:
  // the module run on one layer's weights (the first layer's; stacked: one of their shape)
  std::shared_ptr<DecoderLayer> layer_;
  // LayersMode::assume_pure: the traced layer, made on first use
  mutable std::function<Tensor(const ParamMap&, const ParamMap&, const Tensor&)> pure_layer_;
};

/**
 * The model's parameters under per-layer names ("layers.3.attn.q_proj.weight"), whether or
 * not it keeps its layers stacked: the form to save, so that a model of either kind (and
 * other frameworks) reads the file.
 */
ParamMap per_layer_parameters(const DecoderLM& model);
/**
 * Sets the model's parameters from per-layer tensors (as per_layer_parameters() names them),
 * stacking them if the model keeps its layers stacked. Every parameter must be given with
 * its shape; floating tensors are converted to the model's dtype. lt::Error names the first
 * tensor that is missing, unexpected or of the wrong shape.
 */
void load_per_layer_parameters(DecoderLM& model, const ParamMap& tensors);

/**
 * Rotary position embedding (Llama's "rotate half" form) of x [..., seq, head_dim] for
 * positions 0..seq-1.
 */
Tensor apply_rotary(const Tensor& x, double theta);

}  // namespace lazytrace::nn
