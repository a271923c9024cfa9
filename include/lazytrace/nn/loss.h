#pragma once
/** Losses, as in torch.nn.functional, with mean reduction. */
#include <cstdint>

#include "lazytrace/trace/tensor.h"

namespace lazytrace::nn {

/** How a loss reduces its per-element values, as torch's `reduction`. */
enum class Reduction { Mean, Sum, None };

/**
 * Negative log-likelihood of integer `targets` under softmax(`logits`), computed stably
 * through log_softmax. logits [N, C] or [..., C]; targets the leading shape, int32 or int64.
 * Targets equal to ignore_index count for nothing (Mean: the mean is over the rest; None:
 * their entries are 0). Out-of-range targets give lt::Error when the loss is computed.
 */
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

/** cross_entropy's loss given log-probabilities [..., C] (torch's nll_loss, classes last). */
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

/** mean((input - target)^2); shapes broadcast. */
Tensor mse_loss(const Tensor& input, const Tensor& target);

}  // namespace lazytrace::nn
