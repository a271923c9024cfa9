#pragma once
/** Reverse-mode autograd: grad mode guards and the functional gradient. */
#include <vector>

#include "lazytrace/trace/tensor.h"

namespace lazytrace {

/** While alive, ops on this thread record no gradient history (like torch.no_grad()). */
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/** While alive, ops on this thread record gradient history again (torch.enable_grad()). */
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

/** Whether ops on this thread record gradient history. */
bool is_grad_enabled();
/** Sets it for this thread (torch.set_grad_enabled); the guards restore what they found. */
void set_grad_enabled(bool enabled);

namespace autograd {

struct GradOptions {
  bool retain_graph = false;  // keep the tape for another backward (implied by create_graph)
  bool create_graph = false;  // record the backward ops too (gradients of gradients)
  /** An input the outputs do not depend on gets zeros; false: an undefined tensor (as
   * torch's allow_unused=True). */
  bool zeros_for_unused = true;
};

/**
 * d(outputs)/d(inputs), like torch.autograd.grad: returns one gradient per input
 * without touching any grad(). `grad_outputs` holds one gradient per output (empty: each
 * output must have one element and gets 1). An input the outputs do not depend on gets
 * zeros (see GradOptions). With create_graph the gradients are recorded even under
 * NoGradGuard, as torch's.
 */
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions options = {});

/**
 * Counts the optimizers that update `leaf` (one that requires grad): an optimizer holds
 * each of its parameters while it lives. Module::to refuses to replace a held tensor, which
 * would leave the optimizer updating the old one.
 */
void hold_for_updates(const Tensor& leaf, bool hold);
/** Whether an optimizer holds `leaf` (see hold_for_updates). */
bool held_for_updates(const Tensor& leaf);

}  // namespace autograd
}  // namespace lazytrace
