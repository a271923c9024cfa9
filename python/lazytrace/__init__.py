"""lazytrace: tensor programs traced lazily and compiled once.

    import lazytrace as lt

    @lt.assume_pure
    def do_math(a, b, c=42):
        return a @ b + c

    x, y = lt.randn(4, 4), lt.randn(4, 4)
    for _ in range(1000):
        result = do_math(x, y)      # traced once, one call node per call
    lt.sync()                       # compiled once per graph structure, and run

Ops record into a graph; lt.sync() (or item(), numpy(), print) computes it. The spec's
tools (assume_pure, scan, scan_layers, while_loop, fori_loop, compile) cut the cost of
tracing and compiling repeated work; autograd flows through all of them.
"""

import atexit as _atexit
import os as _os

from . import _lazytrace as _C
from ._lazytrace import Tensor, TraceReadError, TreeSpec, is_grad_enabled
from ._lazytrace import tree_flatten, tree_unflatten
from ._lazytrace import clear_caches, save_file as _save_file, load_file as _load_file
from ._lazytrace import load_metadata as _load_metadata
from ._tensor import *  # noqa: F401,F403  (creation and op functions)
from ._composite import *  # noqa: F401,F403  (torch ops composed of those)
from ._tensor import dtype
from ._tools import (assume_pure, compile, enable_grad, fori_loop, no_grad, scan,
                     set_grad_enabled, sync, while_loop)
from ._scan_layers import scan_layers
from ._autocast import autocast, get_autocast_dtype, is_autocast_enabled
from ._pytree import tree_map, tree_leaves
from . import autograd, debug, distributed, func, metrics, nn, optim, experimental, models  # noqa: E402

__version__ = "0.1.0"

def _at_exit():
    # daemon threads' calls into lazytrace park (python/src/module.cpp); the caches, and
    # tensors' backward passes, release the traced Python functions they hold while the
    # interpreter still runs
    import threading
    me = threading.current_thread()
    _C._at_exit(len([t for t in threading.enumerate() if t is not me and t.is_alive()]) > 0)


_atexit.register(_at_exit)

float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int32 = dtype.int32
int64 = dtype.int64
double, half, long = float64, float16, int64


def save_file(tensors, filename, metadata=None):
    """Writes a dict of name -> Tensor as safetensors (readable by the safetensors package)."""
    _save_file(tensors, _os.fspath(filename), metadata)


def _existing(filename, op):
    path = _os.fspath(filename)
    if "\0" not in path and not _os.path.exists(path):  # as open() and torch.load say it
        raise FileNotFoundError(2, f"[{op}] no such file", path)
    return path


def load_file(filename):
    """Reads a safetensors file (a str or os.PathLike) as a dict of name -> Tensor."""
    return _load_file(_existing(filename, "load_file"))


def load_metadata(filename):
    """The string metadata of a safetensors file (a str or os.PathLike), as a dict."""
    return _load_metadata(_existing(filename, "load_metadata"))


def devices():
    """The devices this build has."""
    return ["cpu"]


# names that shadow builtins come last, so nothing above sees them
float = float32  # noqa: A001
int = int32  # noqa: A001
bool = dtype.bool  # noqa: A001
