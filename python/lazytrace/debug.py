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
