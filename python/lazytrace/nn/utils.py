"""torch.nn.utils' gradient clipping, recorded lazily: the norm and the scaling join the
step's graph (nothing is read on the host unless error_if_nonfinite asks), so a compiled
step that clips stays one graph."""

import math

from .. import _lazytrace as _C
from .._lazytrace import Tensor
from .._tensor import tensor
from .._tools import no_grad


def _params(op, parameters):
    if isinstance(parameters, Tensor):
        return [parameters]
    try:
        params = list(parameters)
    except TypeError:
        raise TypeError(f"[{op}] parameters must be a Tensor or an iterable of Tensors, got "
                        f"{type(parameters).__name__}") from None
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"[{op}] parameter {i} is a {type(p).__name__}, not a Tensor")
    return params


def _number(op, name, value):
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"[{op}] {name} must be a number, got {type(value).__name__}")
    return float(value)


def _check_finite(op, total, norm_type):
    value = total.item()
    if not math.isfinite(value):
        raise RuntimeError(
            f"[{op}] the total norm of order {norm_type} of the gradients is {value}, so "
            "they cannot be clipped; pass error_if_nonfinite=False to clip anyway (the "
            "gradients become NaN), or find where they overflow")


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm_type-norm of the tensors taken together as one vector (torch 2.6's name;
    pass [p.grad for p in params]): a 0-d tensor, float32 unless a tensor is float64.
    error_if_nonfinite reads it and raises if it is NaN or infinite."""
    op = "get_total_norm"
    with no_grad():  # as torch: the norm of gradients, not a function to differentiate
        total = _C.total_norm(_params(op, tensors), _number(op, "norm_type", norm_type))
    if error_if_nonfinite:
        _check_finite(op, total, norm_type)
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scales the gradients in place by min(1, max_norm / (total_norm + 1e-6)), total_norm
    from get_total_norm (torch 2.6's second half of clip_grad_norm_)."""
    op = "clip_grads_with_norm_"
    if not isinstance(total_norm, Tensor):
        total_norm = tensor(_number(op, "total_norm", total_norm))
    with no_grad():
        _C.clip_grads_with_norm_(_params(op, parameters), _number(op, "max_norm", max_norm),
                                 total_norm)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scales the gradients in place so that their total norm is at most max_norm (by
    min(1, max_norm / (norm + 1e-6)), as torch), and returns the norm before clipping.
    error_if_nonfinite reads the norm (it computes the pending graph) and raises if it is
    NaN or infinite."""
    op = "clip_grad_norm_"
    params = _params(op, parameters)
    max_norm = _number(op, "max_norm", max_norm)
    with no_grad():
        total = _C.grad_norm(params, _number(op, "norm_type", norm_type))
        if error_if_nonfinite:
            _check_finite(op, total, norm_type)
        _C.clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element into [-clip_value, clip_value] in place."""
    op = "clip_grad_value_"
    _C.clip_grad_value_(_params(op, parameters), _number(op, "clip_value", clip_value))
