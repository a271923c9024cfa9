// while_loop: cond and body traced together once, recorded as one Loop node whose cond
// the backend checks before each iteration, so the loop never returns to the host.
#include "autograd/tape.h"
#include "lazytrace/autograd/autograd.h"
#include "lazytrace/tools/scan.h"
#include "metrics/known.h"
#include "tools/loops.h"

namespace lazytrace::tools {

std::vector<Tensor> run_while(const std::vector<const Tensor*>& init, const LoopTraceFn& fn) {
  const char* tool = "while_loop";
  metrics::loop_trace.add();
  const int nc = static_cast<int>(init.size());
  ir::Loop l;
  l.kind = ir::Loop::Kind::While;
  l.num_carry = nc;
  std::vector<trace::BodyInput> inputs;
  std::vector<Tensor> lifted;
  uint64_t rng_count = 0;
  {
    trace::TraceScope scope(tool);
    // the caller's grad mode, as in scan's bodies: a gradient taken inside works
    if (autograd::grad_enabled()) scope.set_lift_grad(trace::TraceScope::LiftGrad::same);
    std::vector<Tensor> c;
    for (const Tensor* t : init) c.push_back(scope.input(t->shape(), t->dtype()));
    LoopTraced t = fn(c, {}, {});
    const Tensor& cond = t.ys.at(0);
    if (cond.dtype() != DType::bool_ || cond.numel() != 1)
      fail(tool, "cond_fn must return a bool scalar tensor, got ", cond.type_str(),
           ". Return a comparison of tensors (i < n), not a host bool; reduce a tensor of "
           "flags with an op (lt::amax) if it has several elements.");
    std::vector<Tensor> outs{cond};
    outs.insert(outs.end(), t.carry.begin(), t.carry.end());
    std::shared_ptr<const ir::Body> both = scope.finish(outs, tool);
    // two bodies over the same inputs: the condition, and the next carries
    std::vector<ir::NodePtr> body_results(both->results.begin() + 1, both->results.end());
    l.cond = ir::make_body({both->results[0]}, both->num_inputs, "while_loop_cond");
    l.body = ir::make_body(std::move(body_results), both->num_inputs, "while_loop_body");
    inputs = scope.inputs();
    lifted = scope.lifted();
    rng_count = scope.rng_count();
  }
  assign_roles(l, inputs, nc, 0, rng_count);
  // iteration j draws at offset base + j * rng_count; the count of iterations is unknown,
  // so a loop reserves 2^32 iterations' worth of the generator
  std::pair<ir::NodePtr, ir::NodePtr> rng;
  if (rng_count > 0) rng = trace::random_operands(rng_count << 32);
  std::vector<ir::NodePtr> carries;
  for (const Tensor* t : init) carries.push_back(trace::node_of(*t));
  std::vector<Tensor> out = record_loop(std::move(l), loop_operands(inputs, carries, lifted, rng));
  std::vector<const Tensor*> diff_inputs = init;
  for (const Tensor& t : lifted) diff_inputs.push_back(&t);
  bool differentiated = false;
  if (autograd::grad_enabled())
    for (const Tensor* t : diff_inputs)
      differentiated = differentiated || autograd::requires_grad(*t);
  if (differentiated)
    autograd::record_multi(
        out, tool, diff_inputs, [](const std::vector<Tensor>&) -> std::vector<Tensor> {
          fail("while_loop",
               "reverse-mode differentiation through while_loop is not supported: its number of "
               "iterations is known only when it runs, so there is nothing to reverse. Use "
               "fori_loop with integer bounds (a scan, differentiable) or scan over xs with a "
               "fixed length; or compute the loop under NoGradGuard.");
        });
  return out;
}

}  // namespace lazytrace::tools
