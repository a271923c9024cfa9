// copy_: replace a tensor's contents in place (lazily), with PyTorch's autograd rules for
// in-place writes, and with a traced function's rules for tensors from outside it.
#include "ops/op_helpers.h"

namespace lazytrace {

Tensor& Tensor::copy_(const Tensor& src) {
  trace::OpScope scope;
  if (!defined()) fail("copy_", "the tensor is undefined (default-constructed); assign it first.");
  if (!src.defined())
    fail("copy_", "argument 'src' is an undefined (default-constructed) tensor; pass a tensor.");
  TensorImpl& self = *impl();
  ir::check_broadcast_to("copy_", src.shape(), self.shape);
  const bool grad_mode = autograd::grad_enabled();
  // In a traced function, a tensor from outside is written through its stand-in (compile
  // writes it back after the call); where writes are not allowed it is an error.
  const bool outer = trace::is_outer(*this);
  const bool writes = outer && trace::writes_allowed();
  if (outer && !writes)
    fail(trace::tracing_tool(), "the traced function writes into a tensor from outside it (",
         type_str(),
         ") with copy_; a traced function must be pure. Return the new value "
         "and copy it after the call (lt::compile writes such tensors back for you).");
  if (grad_mode && autograd::requires_grad(*this) && is_leaf())
    fail("copy_", "a leaf tensor that requires grad (", type_str(),
         ") cannot be written in place while gradients are recorded; wrap the update in "
         "lt::NoGradGuard (optimizers do).");
  ir::NodePtr n = trace::node_of(src);
  if (n->dtype != self.dtype) {
    Shape s = n->shape;
    n = ir::make_node(ir::OpKind::Cast, self.dtype, std::move(s), std::move(n));
  }
  if (n->shape != self.shape)
    n = ir::make_node(ir::OpKind::BroadcastTo, self.dtype, self.shape, std::move(n));
  if (writes)
    trace::write_outer(*this, n);
  else
    trace::set_value(self, std::move(n));
  // The old value's history no longer matters; the new value's does. A write while
  // gradients are not recorded keeps the history, as PyTorch's (the new value counts as
  // the old one plus a constant).
  const Tensor& target = autograd::on_tape(*this);
  if (grad_mode && !target.is_leaf()) autograd::clear_history(target);
  if (grad_mode && autograd::requires_grad(src))
    ops::record_grad(target, "copy_", {&src},
                     [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return *this;
}

}  // namespace lazytrace
