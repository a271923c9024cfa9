// Losses. cross_entropy picks each target's log-probability with a one-hot select, which
// fuses with log_softmax; its gradient is softmax minus the one-hot target. Under autocast
// each takes its inputs in float32 (lazytrace/ops/autocast.h).
#include "lazytrace/nn/loss.h"

#include <algorithm>
#include <string_view>

#include "lazytrace/ops/autocast.h"
#include "lazytrace/ops/ops.h"
#include "ops/checks.h"

namespace lazytrace::nn {

namespace {

// The per-target negative log-likelihoods of log_probs [..., classes] (0 at ignored
// targets), reduced. Picked with where, not a one-hot product: a masked class's -inf
// times 0 would make the loss NaN.
Tensor nll(const char* op, const Tensor& log_probs, const Tensor& targets, int64_t ignore_index,
           Reduction reduction) {
  if (!log_probs.defined() || !targets.defined()) fail(op, "got an undefined tensor.");
  if (!is_floating(log_probs.dtype()) || log_probs.ndim() < 1)
    fail(op, op == std::string_view("nll_loss") ? "log_probs" : "logits",
         " must be floating [..., classes], got ", log_probs.type_str(), ".");
  if (targets.dtype() != DType::int32 && targets.dtype() != DType::int64)
    fail(op, "targets must be int32 or int64 class indices, got ", targets.type_str(),
         "; for probabilities, use -sum(p * log_softmax(logits)).");
  std::vector<int64_t> lead = log_probs.shape().vec();
  const int64_t classes = lead.back();
  lead.pop_back();
  if (targets.shape() != Shape(lead))
    fail(op, "targets ", targets.type_str(), " must have the leading shape ", Shape(lead).str(),
         " of ", log_probs.type_str(), ".");
  // targets computed in the graph are checked when the loss is; host data now, as PyTorch
  // does (the check alone runs)
  Tensor checked =
      ops::check_indices(targets, classes, ignore_index,
                         op == std::string_view("nll_loss") ? ops::IndexCheck::NllLossTargets
                                                            : ops::IndexCheck::CrossEntropyTargets);
  if (!targets.is_pending()) sync({checked});
  Tensor flat_targets = reshape(checked, {-1});
  Tensor one_hot =
      arange(static_cast<double>(classes), targets.dtype()) == unsqueeze(flat_targets, 1);
  Tensor picked = sum(where(one_hot, reshape(log_probs, {-1, classes}), 0.0), {1});
  Tensor valid = flat_targets != ignore_index;
  Tensor loss = where(valid, -picked, 0.0);
  switch (reduction) {
    case Reduction::None:
      return reshape(loss, Shape(lead));
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      break;
  }
  // a 16-bit loss is averaged in float32, as PyTorch accumulates it: the sum and the count
  // of targets would overflow float16 from 65,504
  const DType dtype = log_probs.dtype();
  const DType acc = dtype == DType::float16 || dtype == DType::bfloat16 ? DType::float32 : dtype;
  return astype(sum(astype(loss, acc)) / sum(astype(valid, acc)), dtype);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, int64_t ignore_index,
                     Reduction reduction) {
  const Tensor logits = ops::autocast_float32(logits_in);
  if (logits.defined() && is_floating(logits.dtype()) && logits.ndim() >= 1)
    return nll("cross_entropy", log_softmax(logits, -1), targets, ignore_index, reduction);
  return nll("cross_entropy", logits, targets, ignore_index, reduction);  // its errors
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index,
                Reduction reduction) {
  return nll("nll_loss", ops::autocast_float32(log_probs), targets, ignore_index, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  if (!input.defined() || !target.defined()) fail("mse_loss", "got an undefined tensor.");
  const Shape &a = input.shape(), &b = target.shape();
  for (int i = 1; i <= std::min(a.size(), b.size()); ++i)
    if (a[a.size() - i] != b[b.size() - i] && a[a.size() - i] != 1 && b[b.size() - i] != 1)
      fail("mse_loss", "input of shape ", a.str(), " and target of shape ", b.str(),
           " do not broadcast: give the target the input's shape.");
  Tensor d = ops::autocast_float32(input) - ops::autocast_float32(target);
  return mean(d * d);
}

}  // namespace lazytrace::nn
