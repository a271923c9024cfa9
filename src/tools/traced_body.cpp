// The VJP of a traced body, traced jointly with its forward (assume_pure, compile, scan).
#include "tools/traced_body.h"

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::tools {

JointVjp joint_vjp(trace::TraceScope& scope, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs, const std::vector<Tensor>& lifted,
                   const char* tool, const std::string& what) {
  std::vector<Tensor> outs, cots;
  for (const Tensor& y : outputs) {
    if (!is_floating(y.dtype())) continue;
    Tensor cot = scope.extra(y.shape(), y.dtype());
    if (!y.requires_grad()) continue;
    outs.push_back(y);
    cots.push_back(cot);
  }
  JointVjp j;
  std::vector<Tensor> wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (is_floating(inputs[i].dtype())) {
      wrt.push_back(inputs[i]);
      j.grad_of.push_back(static_cast<int>(i));
    }
  const std::vector<Tensor>& lifted_ph = scope.lifted_placeholders();
  for (size_t k = 0; k < lifted_ph.size(); ++k)
    if (is_floating(lifted_ph[k].dtype())) {
      wrt.push_back(lifted_ph[k]);
      j.grad_of.push_back(static_cast<int>(inputs.size() + k));
    }
  if (!outs.empty() && !wrt.empty()) {
    j.grads = autograd::grad(outs, wrt, cots);
  } else {
    for (const Tensor& w : wrt) j.grads.push_back(zeros_like(w));
  }
  const std::vector<Tensor>& again = scope.lifted();
  bool same = again.size() == lifted.size();
  for (size_t i = 0; same && i < again.size(); ++i) same = again[i].impl() == lifted[i].impl();
  if (!same)
    fail(tool, what, " used different outside tensors when traced again for backward (",
         again.size(), " instead of ", lifted.size(), "); it must be pure.");
  return j;
}

}  // namespace lazytrace::tools
