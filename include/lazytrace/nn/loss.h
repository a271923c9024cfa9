#pragma once
/** Losses, as in torch.nn.functional, with mean reduction. */
#include <cstdint>

#include "lazytrace/trace/tensor.h"

namespace lazytrace::nn {

/**
 * Mean negative log-likelihood of integer `targets` under softmax(`logits`), computed
 * stably through log_softmax. logits [N, C] or [..., C]; targets the leading shape, int32
 * or int64. Targets equal to ignore_index count for nothing (the mean is over the rest).
 * Out-of-range targets give lt::Error when the loss is computed.
 */
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

/** mean((input - target)^2); shapes broadcast. */
Tensor mse_loss(const Tensor& input, const Tensor& target);

}  // namespace lazytrace::nn
