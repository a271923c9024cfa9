#pragma once
/** Reverse-mode autograd: grad mode guards and the functional gradient. */
#include <functional>
#include <string>
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

/** A hand-written backward: one gradient per output and the outputs in, one gradient per
 * input out. */
using CustomBackward = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs,
                                                         const std::vector<Tensor>& outputs)>;

/**
 * A differentiable function with its own backward, as torch.autograd.Function: `outputs`
 * were computed from `inputs` (under NoGradGuard, or from detached inputs); the returned
 * tensors are the outputs (new handles) with a gradient history whose VJP is `backward`.
 * It gets one gradient per output (zeros where none reached an output) and the outputs
 * (with their history in a create_graph backward, so that a rule reading its result, as
 * exp's, has a gradient too), and returns one gradient per input: of the input's shape
 * (cast to its dtype), or undefined for none. The backward's ops are recorded like any
 * others (lazily; differentiable again with create_graph). Where
 * no input requires grad, or gradients are not recorded, the outputs get no history.
 */
std::vector<Tensor> custom_function(const std::string& name, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, CustomBackward backward);

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
