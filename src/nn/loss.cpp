// Losses. cross_entropy picks each target's log-probability with a one-hot mask, which
// fuses with log_softmax; its gradient is softmax minus the one-hot target.
#include "lazytrace/nn/loss.h"

#include "lazytrace/ops/ops.h"
#include "ops/checks.h"

namespace lazytrace::nn {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const char* op = "cross_entropy";
  if (!logits.defined() || !targets.defined()) fail(op, "got an undefined tensor.");
  if (!is_floating(logits.dtype()) || logits.ndim() < 1)
    fail(op, "logits must be floating [..., classes], got ", logits.type_str(), ".");
  if (targets.dtype() != DType::int32 && targets.dtype() != DType::int64)
    fail(op, "targets must be int32 or int64 class indices, got ", targets.type_str(),
         "; for probabilities, use -sum(p * log_softmax(logits)).");
  std::vector<int64_t> lead = logits.shape().vec();
  const int64_t classes = lead.back();
  lead.pop_back();
  if (targets.shape() != Shape(lead))
    fail(op, "targets ", targets.type_str(), " must have the logits' leading shape ",
         Shape(lead).str(), " (logits ", logits.type_str(), ").");
  // targets computed in the graph are checked when the loss is; host data now, as PyTorch
  // does (the check alone runs)
  Tensor checked = ops::check_indices(targets, classes, ignore_index,
                                      ops::IndexCheck::CrossEntropyTargets);
  if (!targets.is_pending()) sync({checked});
  Tensor flat_logits = reshape(logits, {-1, classes});
  Tensor flat_targets = unsqueeze(reshape(checked, {-1}), 1);
  Tensor one_hot = arange(static_cast<double>(classes), targets.dtype()) == flat_targets;
  Tensor picked = sum(log_softmax(flat_logits, -1) * astype(one_hot, logits.dtype()), {1});
  Tensor valid = astype(reshape(flat_targets, {-1}) != ignore_index, logits.dtype());
  return -sum(picked * valid) / sum(valid);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  if (!input.defined() || !target.defined()) fail("mse_loss", "got an undefined tensor.");
  Tensor d = input - target;
  return mean(d * d);
}

}  // namespace lazytrace::nn
