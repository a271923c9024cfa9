"""torch.autograd's functional gradient."""

from . import _lazytrace as _C
from ._lazytrace import Tensor


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """d(outputs)/d(inputs) without touching .grad, as torch.autograd.grad (a tuple). An
    input the outputs do not depend on is an error, unless allow_unused=True (its gradient
    is None) or materialize_grads=True (zeros)."""
    single = isinstance(inputs, Tensor)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if not inputs:
        raise RuntimeError("[grad] grad requires non-empty inputs: pass the tensors to "
                           "differentiate with respect to")
    for i, y in enumerate(outputs):
        if isinstance(y, Tensor) and not y.requires_grad:
            raise RuntimeError(f"[grad] element {i} of tensors does not require grad and does "
                               "not have a grad_fn: it was computed without gradient history "
                               "(under no_grad, or from tensors that do not require grad)")
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    if grad_outputs is not None:
        grad_outputs = list(grad_outputs)
        for i, (g, y) in enumerate(zip(grad_outputs, outputs)):
            if g is None:  # torch: implied for a one-element output
                if y.numel() != 1:
                    raise RuntimeError(f"[grad] grad_outputs[{i}] is None for output {i} of "
                                       f"shape {list(y.shape)}: a gradient can be implied only "
                                       "for a one-element output")
                grad_outputs[i] = _C.full(y.shape, 1.0, y.dtype)
    retain = bool(create_graph) if retain_graph is None else bool(retain_graph)
    out = _C.grad(outputs, inputs, grad_outputs, retain, bool(create_graph),
                  bool(materialize_grads))
    if not (allow_unused or materialize_grads) and any(g is None for g in out):
        raise RuntimeError("[grad] One of the differentiated Tensors appears to not have been "
                           "used in the graph. Set allow_unused=True if this is the desired "
                           "behavior.")
    return tuple(out)
