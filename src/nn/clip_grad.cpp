// Gradient clipping (torch.nn.utils): the norm and the scaling are ops like any other, so
// they join the step's graph; nothing is read on the host unless error_if_nonfinite asks.
#include "lazytrace/nn/clip_grad.h"

#include <cmath>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::nn {

namespace {

// The gradients of the parameters that have one, checked.
std::vector<Tensor> grads_of(const char* op, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      fail(op, "parameter ", i, " is an undefined (default-constructed) tensor.");
    Tensor g = params[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

void check_norm_type(const char* op, double p) {
  if (!(p > 0))
    fail(op, "norm_type must be positive or infinity, got ", p,
         " (2 for the Euclidean norm, infinity for the largest |gradient|).");
}

}  // namespace

Tensor total_norm(const std::vector<Tensor>& tensors, double norm_type) {
  const char* op = "total_norm";
  check_norm_type(op, norm_type);
  DType acc = DType::float32;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      fail(op, "tensor ", i, " is an undefined (default-constructed) tensor.");
    if (!is_floating(tensors[i].dtype()))
      fail(op, "tensor ", i, " is ", tensors[i].type_str(), "; a norm takes floating tensors.");
    if (tensors[i].dtype() == DType::float64) acc = DType::float64;
  }
  if (tensors.empty()) return scalar(0.0, acc);
  NoGradGuard no_grad;  // as torch: a norm of gradients, not a function to differentiate
  const bool inf = std::isinf(norm_type);
  std::vector<Tensor> parts;  // per tensor: max |x|, or sum |x|^p
  for (const Tensor& t : tensors) {
    const Tensor x = astype(t, acc);
    if (norm_type == 2) {  // x * x, the square's bits whatever x's sign (compiler/gram_norms.cpp)
      parts.push_back(sum(x * x));
      continue;
    }
    const Tensor a = abs(x);
    if (inf)
      parts.push_back(t.numel() ? amax(a) : scalar(0.0, acc));
    else if (norm_type == 1)
      parts.push_back(sum(a));
    else
      parts.push_back(sum(pow(a, norm_type)));
  }
  const Tensor all = parts.size() == 1 ? parts[0] : stack(parts);
  if (inf) return amax(all);
  const Tensor total = sum(all);
  if (norm_type == 2) return sqrt(total);
  if (norm_type == 1) return total;
  return pow(total, 1.0 / norm_type);
}

Tensor grad_norm(const std::vector<Tensor>& params, double norm_type) {
  return total_norm(grads_of("grad_norm", params), norm_type);
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm,
                           const Tensor& total_norm) {
  const char* op = "clip_grad_norm_";
  if (!(max_norm >= 0))  // (infinity clips nothing: the norm alone, as torch)
    fail(op, "max_norm must be a number >= 0, got ", max_norm, ".");
  if (!total_norm.defined() || total_norm.ndim() != 0 || !is_floating(total_norm.dtype()))
    fail(op, "the total norm must be a floating 0-d tensor, got ",
         total_norm.defined() ? total_norm.type_str() : std::string("an undefined tensor"), ".");
  const std::vector<Tensor> grads = grads_of(op, params);
  if (grads.empty()) return;
  NoGradGuard no_grad;
  // torch's factor: max_norm / (norm + 1e-6), at most 1 (a NaN norm stays NaN)
  const Tensor coef = minimum(max_norm / (total_norm + 1e-6), scalar(1.0, total_norm.dtype()));
  for (const Tensor& grad : grads) {
    Tensor g = grad;
    g.copy_(astype(g, coef.dtype()) * coef);
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  const Tensor total = grad_norm(params, norm_type);
  if (error_if_nonfinite) {
    const double v = total.item<double>();
    if (!std::isfinite(v))
      fail("clip_grad_norm_", "the total norm of order ", norm_type, " of the gradients is ", v,
           ", so they cannot be clipped; pass error_if_nonfinite=false to clip anyway (the "
           "gradients become NaN), or find where they overflow.");
  }
  clip_grads_with_norm_(params, max_norm, total);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  const char* op = "clip_grad_value_";
  if (!(clip_value >= 0)) fail(op, "clip_value must be >= 0, got ", clip_value, ".");
  NoGradGuard no_grad;
  for (const Tensor& grad : grads_of(op, params)) {
    Tensor g = grad;
    g.copy_(minimum(maximum(g, scalar(-clip_value, g.dtype())), scalar(clip_value, g.dtype())));
  }
}

}  // namespace lazytrace::nn
