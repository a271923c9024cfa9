// Optimizer updates as single ops: one pass over a parameter and its state.
#include "ops/op_helpers.h"

namespace lazytrace {

using ir::OpKind;

AdamWState adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, const Tensor& decay, const Tensor& step_size,
                        const Tensor& inv_sqrt_bc2, double beta1, double beta2, double eps) {
  trace::OpScope scope;
  const char* op = "adamw_update";
  const Tensor* same[] = {&param, &grad, &exp_avg, &exp_avg_sq};
  const char* same_names[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
  const Tensor* numbers[] = {&decay, &step_size, &inv_sqrt_bc2};
  const char* number_names[] = {"decay", "step_size", "inv_sqrt_bc2"};
  for (int k = 0; k < 4; ++k) ops::check_defined(op, *same[k], same_names[k]);
  for (int k = 0; k < 3; ++k) ops::check_defined(op, *numbers[k], number_names[k]);
  if (!is_floating(param.dtype()))
    fail(op, "needs a floating parameter, got ", ops::type_of(param), ".");
  for (int k = 1; k < 4; ++k)
    if (same[k]->dtype() != param.dtype() || same[k]->shape() != param.shape())
      fail(op, same_names[k], " must match the parameter ", ops::type_of(param), ", got ",
           ops::type_of(*same[k]), "; keep the optimizer state in the parameter's dtype.");
  for (int k = 0; k < 3; ++k)
    if (numbers[k]->ndim() != 0 || !is_floating(numbers[k]->dtype()))
      fail(op, number_names[k], " must be a 0-d floating tensor, got ", ops::type_of(*numbers[k]),
           ".");
  if (is_grad_enabled() && (param.requires_grad() || grad.requires_grad()))
    fail(op, "is not differentiable: call it under lt::NoGradGuard (as optimizers do).");
  ir::Attrs a;
  a.push_double(beta1);
  a.push_double(beta2);
  a.push_double(eps);
  std::vector<ir::NodePtr> operands;
  for (const Tensor* t : same) operands.push_back(trace::node_of(*t));
  for (const Tensor* t : numbers) operands.push_back(trace::node_of(*t));
  ir::NodePtr update =
      ir::make_node(OpKind::AdamW, param.dtype(), param.shape(), std::move(operands), a);
  std::vector<ir::NodePtr> results;
  for (int k = 0; k < 3; ++k) {
    ir::Attrs r;
    r.push(k);
    results.push_back(ir::make_node(OpKind::CallResult, param.dtype(), param.shape(), update, r));
  }
  update->set_results(results);
  return {trace::make_pending(results[0]), trace::make_pending(results[1]),
          trace::make_pending(results[2])};
}

}  // namespace lazytrace
