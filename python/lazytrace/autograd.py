"""torch.autograd's functional gradient."""

from . import _lazytrace as _C
from ._lazytrace import Tensor


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None):
    """d(outputs)/d(inputs) without touching .grad, as torch.autograd.grad (a tuple)."""
    single = isinstance(inputs, Tensor)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    retain = bool(create_graph) if retain_graph is None else bool(retain_graph)
    out = _C.grad(outputs, inputs, None if grad_outputs is None else list(grad_outputs), retain,
                  bool(create_graph))
    return tuple(out)
