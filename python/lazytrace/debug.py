"""The pending graph, and what syncing it would run."""

from . import _lazytrace as _C
from ._lazytrace import Tensor


def _list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def to_text(tensors):
    """The pending graph of these tensors as text, a line per node."""
    return _C._debug.to_text(_list(tensors))


def to_dot(tensors):
    """The pending graph of these tensors in Graphviz DOT."""
    return _C._debug.to_dot(_list(tensors))


def to_program(tensors):
    """The compiled kernel list and buffer plan that syncing these tensors would run."""
    return _C._debug.to_program(_list(tensors))


def set_disabled_passes(names):
    """Switches off the named optional passes (every speed mechanism of the compiler and the
    backend; "all": each one) for the syncs from now on; returns the names off before.
    LAZYTRACE_DISABLE_PASSES=name,... does the same at start."""
    return _C._debug.set_disabled_passes([names] if isinstance(names, str) else list(names))


def disabled_passes():
    """The names of the optional passes switched off now."""
    return _C._debug.disabled_passes()


def pass_names():
    """The names of every optional pass."""
    return _C._debug.pass_names()


def kernel_choices():
    """The kernels the backend chose by timing them on this machine (the gemm_choice pass),
    one line per product: its shape, the kernel kept, and each candidate's GFLOP/s."""
    return _C._debug.kernel_choices()
