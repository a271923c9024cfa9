#pragma once
/**
 * Gradient clipping, as torch.nn.utils: recorded lazily like any other op, so that it joins
 * the step's one graph (no read of the norm on the host, no new graph when it clips or
 * not).
 */
#include <vector>

#include "lazytrace/trace/tensor.h"

namespace lazytrace::nn {

/**
 * torch.nn.utils.get_total_norm: the `norm_type`-norm of the floating tensors taken together
 * as one vector, (sum |x|^p)^(1/p), or max |x| for p = infinity. A 0-d tensor, float64 if a
 * tensor is, else float32 (16-bit tensors are summed in float32); 0 for no tensors.
 * norm_type must be positive (or infinity). Not recorded for gradients (as torch's).
 */
Tensor total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0);

/** total_norm of the parameters' gradients (parameters without one skipped). */
Tensor grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

/**
 * torch.nn.utils.clip_grads_with_norm_: scales every gradient by
 * min(1, max_norm / (total_norm + 1e-6)) in place (every holder of the gradient sees it),
 * total_norm a 0-d tensor (grad_norm's, or one all-reduced over ranks).
 */
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm,
                           const Tensor& total_norm);

/**
 * torch.nn.utils.clip_grad_norm_: rescales the gradients so that their norm (grad_norm) is at
 * most max_norm, and returns the norm before clipping. error_if_nonfinite reads the norm on
 * the host (it computes the pending graph) and throws lt::Error if it is NaN or infinite.
 */
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/** torch.nn.utils.clip_grad_value_: clamps every gradient element into [-clip_value,
 * clip_value] in place. */
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace lazytrace::nn
