// SGD and AdamW. Each update is recorded with ops and written back with copy_, so it
// joins the step's graph; numbers that change per step are 0-d tensors (graph
// parameters), so a new learning rate or step count never recompiles.
#include <cmath>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"
#include "lazytrace/optim/optim.h"

namespace lazytrace::optim {
namespace {

Tensor number(double v) {
  return tensor(std::vector<double>{v}, Shape{});
}

std::vector<Tensor> zeros_like_all(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(zeros_like(p));
  return out;
}

// The state and the parameters are computed now, so that step 1 reads buffers exactly as
// every later step does and all steps share one compiled graph.
void materialize(std::vector<Tensor> tensors, const std::vector<Tensor>& more = {}) {
  tensors.insert(tensors.end(), more.begin(), more.end());
  sync(tensors);
}

void check_hyper(const char* op, const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) fail(op, field, " must be in [", lo, ", ", hi, "], got ", v, ".");
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, const char* name)
    : params_(std::move(params)), name_(name) {
  if (params_.empty()) fail(name_, "got an empty parameter list.");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined()) fail(name_, "parameter ", i, " is an undefined tensor.");
    // a leaf that does not require grad (a frozen parameter) is taken, as torch's, and
    // skipped while it has no gradient
    if (!p.is_leaf())
      fail(name_, "parameter ", i, " (", p.type_str(),
           ") is computed from other tensors (not a leaf); optimize the tensors it is made "
           "from, or detach() it and call requires_grad_() on the result.");
    if (!is_floating(p.dtype()))
      fail(name_, "parameter ", i, " (", p.type_str(),
           ") is not floating; parameters must be floating to be trained.");
    for (size_t j = 0; j < i; ++j)
      if (params_[j].impl() == p.impl())
        fail(name_, "parameter ", i, " is the same tensor as parameter ", j,
             "; pass each parameter once.");
  }
  for (const Tensor& p : params_) autograd::hold_for_updates(p, true);
  // made here, outside any trace (lt::compile), so a compiled step carries them; each
  // split of a count takes a spare (at most one per parameter but the first)
  counts_.push_back(number(0));
  count_of_.assign(params_.size(), 0);
  for (size_t i = 1; i < params_.size(); ++i) spare_counts_.push_back(number(-1));
}

Optimizer::~Optimizer() {
  for (const Tensor& p : params_) autograd::hold_for_updates(p, false);
}

void Optimizer::count_updates() {
  const size_t kinds = counts_.size();
  std::vector<int> with(kinds, 0), without(kinds, 0);
  for (size_t i = 0; i < params_.size(); ++i)
    ++(params_[i].grad().defined() ? with : without)[count_of_[i]];
  // A count grows in place for the parameters updated; where only some of its parameters
  // are, the others move to a count of their own that takes the value before, once: it
  // starts at -1 and is written while it still is. (So a step compiled by lt::compile,
  // which repeats these writes on every call, keeps counting right.)
  std::vector<size_t> kept(kinds);
  for (size_t c = 0; c < kinds; ++c) {
    kept[c] = c;
    if (with[c] == 0) continue;
    if (without[c] > 0) {
      kept[c] = counts_.size();
      Tensor own = spare_counts_.back();
      spare_counts_.pop_back();
      own.copy_(where(own < 0.0, counts_[c], own));
      counts_.push_back(own);
    }
    counts_[c].copy_(counts_[c] + 1);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].grad().defined()) count_of_[i] = kept[count_of_[i]];
}

std::vector<Optimizer::State> Optimizer::state() const {
  std::vector<State> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    out[i]["step"] = clone(updates_of(i));
    for (const auto& [name, t] : buffers_of(i)) out[i][name] = clone(t);
  }
  return out;
}

void Optimizer::load_state(const std::vector<State>& state) {
  if (state.size() != params_.size())
    fail(name_, "load_state got the state of ", state.size(), " parameters for ", params_.size(),
         "; load the state of an optimizer over the same parameters.");
  // check everything before anything is written
  std::vector<double> steps(count_kinds(), -1);
  for (size_t i = 0; i < params_.size(); ++i) {
    const State& s = state[i];
    size_t expected = 1;
    for (const auto& [name, t] : buffers_of(i)) {
      ++expected;
      auto it = s.find(name);
      if (it == s.end() || !it->second.defined())
        fail(name_, "load_state: parameter ", i, "'s state has no '", name, "'.");
      if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
        fail(name_, "load_state: parameter ", i, "'s '", name, "' is ", it->second.type_str(),
             " where the optimizer holds ", t.type_str(), ".");
    }
    auto it = s.find("step");
    if (it == s.end() || !it->second.defined() || it->second.numel() != 1)
      fail(name_, "load_state: parameter ", i, "'s state needs a one-element 'step'.");
    if (s.size() != expected)
      fail(name_, "load_state: parameter ", i, "'s state has ", s.size(), " entries where ", name_,
           " keeps ", expected, "; load the state of the same kind of optimizer.");
    const double step = it->second.item<double>();
    if (!(step >= 0 && step == std::floor(step)))
      fail(name_, "load_state: parameter ", i, "'s step must be a whole number >= 0, got ", step,
           ".");
    // a parameter never updated (step 0: frozen, or without gradients so far) follows the
    // others of its count
    double& shared = steps[count_index(i)];
    if (step > 0 && shared > 0 && shared != step)
      fail(name_, "load_state: parameters updated together share one count, but parameter ", i,
           " loads step ", step, " where another loads ", shared,
           "; load the state into an optimizer over parameters updated as often as the saved "
           "ones were.");
    shared = std::max(shared, step);
  }
  NoGradGuard no_grad;
  std::vector<Tensor> written;
  for (size_t i = 0; i < params_.size(); ++i)
    for (auto [name, t] : buffers_of(i)) {
      t.copy_(state[i].at(name));
      written.push_back(t);
    }
  double most = 0;
  for (size_t c = 0; c < steps.size(); ++c) {
    if (steps[c] < 0) continue;
    Tensor count = counts_[c];
    count.copy_(number(steps[c]));
    written.push_back(count);
    most = std::max(most, steps[c]);
  }
  sync(written);
  loaded_steps(static_cast<int64_t>(most));
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

void Optimizer::set_lr(double lr) {
  check_hyper(name_, "lr", lr, 0, INFINITY);
  lr_ = lr;
  if (!lr_t_.defined()) {
    lr_t_ = number(lr);
  } else {
    lr_t_.copy_(number(lr));  // shares the new 0-d buffer: no graph
  }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), "SGD"), options_(options) {
  set_lr(options.lr);
  check_hyper(name_, "momentum", options.momentum, 0, INFINITY);
  check_hyper(name_, "weight_decay", options.weight_decay, 0, INFINITY);
  check_hyper(name_, "dampening", options.dampening, 0, 1);
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    fail(name_, "nesterov momentum needs momentum > 0 and dampening 0.");
  if (options.momentum > 0) momentum_ = zeros_like_all(params_);
  materialize(momentum_, params_);
}

std::vector<std::pair<const char*, Tensor>> SGD::buffers_of(size_t i) const {
  if (momentum_.empty()) return {};
  return {{"momentum_buffer", momentum_[i]}};
}

void SGD::step() {
  NoGradGuard no_grad;
  const Tensor& lr = lr_t_;
  count_updates();
  // As PyTorch: a parameter's first buffer is its gradient itself, later ones decay it.
  // Both are buf = keep * buf + take * g, with keep and take from its update count.
  std::vector<Tensor> keep(count_kinds()), take(count_kinds());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (options_.weight_decay != 0) g = g + options_.weight_decay * p;
    if (options_.momentum > 0) {
      const size_t c = count_index(i);
      if (!keep[c].defined()) {
        Tensor started = astype(updates_of(i) > 1.0, DType::float64);
        keep[c] = started * options_.momentum;
        take[c] = 1 - started * options_.dampening;
      }
      Tensor& buf = momentum_[i];
      buf.copy_(keep[c] * buf + take[c] * g);
      g = options_.nesterov ? g + options_.momentum * buf : buf;
    }
    p.copy_(p - lr * g);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Optimizer(std::move(params), "AdamW"), options_(options) {
  set_lr(options.lr);
  check_hyper(name_, "beta1", options.beta1, 0, 1 - 1e-12);
  check_hyper(name_, "beta2", options.beta2, 0, 1 - 1e-12);
  check_hyper(name_, "eps", options.eps, 0, INFINITY);
  check_hyper(name_, "weight_decay", options.weight_decay, 0, INFINITY);
  m_ = zeros_like_all(params_);
  v_ = zeros_like_all(params_);
  materialize(m_, v_);
  materialize(params_);
}

std::vector<std::pair<const char*, Tensor>> AdamW::buffers_of(size_t i) const {
  return {{"exp_avg", m_[i]}, {"exp_avg_sq", v_[i]}};
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++t_;
  count_updates();
  const double b1 = options_.beta1, b2 = options_.beta2;
  Tensor decay = 1 - lr_t_ * options_.weight_decay;
  // the bias corrections of each parameter's own update count, once per shared count
  std::vector<Tensor> step_sizes(count_kinds()), inv_sqrt_bc2s(count_kinds());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const size_t c = count_index(i);
    if (!step_sizes[c].defined()) {
      step_sizes[c] = lr_t_ / (1 - pow(b1, updates_of(i)));
      inv_sqrt_bc2s[c] = rsqrt(1 - pow(b2, updates_of(i)));
    }
    const Tensor& step_size = step_sizes[c];
    const Tensor& inv_sqrt_bc2 = inv_sqrt_bc2s[c];
    if (options_.fused && g.dtype() == p.dtype()) {
      AdamWState s =
          adamw_update(p, g, m_[i], v_[i], decay, step_size, inv_sqrt_bc2, b1, b2, options_.eps);
      m_[i].copy_(s.exp_avg);
      v_[i].copy_(s.exp_avg_sq);
      p.copy_(s.param);
      continue;
    }
    m_[i].copy_(b1 * m_[i] + (1 - b1) * g);
    v_[i].copy_(b2 * v_[i] + (1 - b2) * (g * g));
    Tensor denom = sqrt(v_[i]) * inv_sqrt_bc2 + options_.eps;
    p.copy_(p * decay - step_size * m_[i] / denom);
  }
}

}  // namespace lazytrace::optim
