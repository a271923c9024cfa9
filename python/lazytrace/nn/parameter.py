"""Parameter: a tensor that requires grad and that a Module registers as a parameter."""

import weakref

from .._lazytrace import Tensor

# the parameters an optimizer holds (id -> parameter, while it lives): Module.to, which gives
# a converted module new Parameter objects, refuses to leave them behind
_OPTIMIZED = weakref.WeakValueDictionary()


def _optimized(p):
    return _OPTIMIZED.get(id(p)) is p


class Parameter(Tensor):
    """nn.Parameter(t): a leaf with t's value that requires grad (unless requires_grad=False);
    assigned to a Module attribute, it is registered as a parameter."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            from .._tensor import zeros

            data = zeros(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"[Parameter] data must be a Tensor, got {type(data).__name__}; make "
                            "one first: nn.Parameter(lazytrace.tensor(data))")
        if requires_grad and not data.dtype.is_floating_point:
            raise ValueError(
                f"[Parameter] only floating-point tensors can require gradients, got "
                f"{data.type_str()}; pass requires_grad=False for a parameter of integers")
        super().__init__(data.detach())
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)


class Buffer(Tensor):
    """nn.Buffer(t): assigned to a Module attribute, it is registered as a buffer."""

    def __init__(self, data, persistent=True):
        if not isinstance(data, Tensor):
            raise TypeError(f"[Buffer] data must be a Tensor, got {type(data).__name__}; make one "
                            "first: nn.Buffer(lazytrace.tensor(data))")
        super().__init__(data.detach())
        self.persistent = persistent
