#pragma once
/**
 * Optimizers. step() records the update lazily (under NoGradGuard) and writes it into
 * the parameters with copy_, so forward, backward and update form one graph, cached from
 * the second step on. State (momentum, moments) is created and materialized when the
 * optimizer is made, so the first step's graph is the same as every later one's.
 * Per-step numbers (learning rate, step count, bias corrections) are 0-d tensors kept as
 * state and computed with ops: changing them never recompiles, and a step traced by
 * lt::compile stays correct on every later call (no host number is frozen into it).
 */
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lazytrace/trace/tensor.h"

namespace lazytrace::optim {

class Optimizer {
 public:
  /** The parameters must be floating leaves; one that does not require grad (frozen) is
   * skipped while it has no gradient, as every parameter without one is. */
  explicit Optimizer(std::vector<Tensor> params, const char* name);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  /** Applies one update from the parameters' grad(); parameters without one are skipped. */
  virtual void step() = 0;
  /** Clears every parameter's gradient (set to none, PyTorch's default). */
  void zero_grad();
  const std::vector<Tensor>& params() const { return params_; }
  double lr() const { return lr_; }
  void set_lr(double lr);

  /** One parameter's state, with torch's names: "step" (its updates so far, 0-d float64),
   * AdamW's "exp_avg" and "exp_avg_sq", SGD's "momentum_buffer" (with momentum). */
  using State = std::map<std::string, Tensor>;
  /** Every parameter's state, in parameter order (torch's state_dict()["state"]), as copies
   * (save them with save_file; load_state resumes the run). */
  std::vector<State> state() const;
  /**
   * Makes a state() this optimizer's: one entry per parameter, each with the names and the
   * parameter's shape and dtype ("step" any number). Values are copied into the optimizer's
   * own tensors, so a step compiled before sees them. Parameters updated together so far
   * share a count and must load the same "step", or 0 (never updated: frozen).
   */
  void load_state(const std::vector<State>& state);

 protected:
  /** Parameter i's buffers by state name (AdamW: exp_avg, exp_avg_sq): handles of the
   * optimizer's own tensors (a copy_ into one writes the optimizer's). */
  virtual std::vector<std::pair<const char*, Tensor>> buffers_of(size_t i) const = 0;
  /** Called after load_state with the largest step loaded. */
  virtual void loaded_steps(int64_t) {}
  /** Counts one update of each parameter that has a gradient (PyTorch's state['step'],
   * per parameter). Parameters updated equally often share one 0-d count, so a step in
   * which every parameter has a gradient reads a single count. */
  void count_updates();
  /** Parameter i's updates so far, a 0-d float64 tensor (shared; see count_updates). */
  const Tensor& updates_of(size_t i) const { return counts_[count_of_[i]]; }
  /** Which shared count parameter i reads: equal for parameters that share one. */
  size_t count_index(size_t i) const { return count_of_[i]; }
  size_t count_kinds() const { return counts_.size(); }

  std::vector<Tensor> params_;
  double lr_ = 0;
  Tensor lr_t_;  // lr as a 0-d float64 tensor
  const char* name_;

 private:
  std::vector<size_t> count_of_;  // per parameter, its entry in counts_
  std::vector<Tensor> counts_;
  std::vector<Tensor> spare_counts_;  // -1 until a split of counts_ takes one
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;  // L2: added to the gradient
  double dampening = 0;
  bool nesterov = false;
};

/** torch.optim.SGD. */
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;

 private:
  std::vector<std::pair<const char*, Tensor>> buffers_of(size_t i) const override;
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p -= lr * weight_decay * p
  /** One adamw_update op per parameter (one pass over p, grad and the moments, like torch's
   * fused=True) instead of the update op by op; the results are identical. */
  bool fused = true;
};

/** torch.optim.AdamW. */
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  void step() override;
  /** step() calls made from host code (a step inside lt::compile runs in the graph). */
  int64_t steps() const { return t_; }

 private:
  std::vector<std::pair<const char*, Tensor>> buffers_of(size_t i) const override;
  void loaded_steps(int64_t steps) override { t_ = steps; }
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

}  // namespace lazytrace::optim
