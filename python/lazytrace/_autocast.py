"""lazytrace.autocast: mixed precision, as torch.autocast on the CPU (the C++ AutocastGuard)."""
import functools
import threading

from . import _lazytrace as _C

_LOWER = (_C.dtype.bfloat16, _C.dtype.float16)


class autocast:
    """Inside, products (matmul, nn.Linear, attention, a decoder's head) run in `dtype`
    (bfloat16, or float16), as torch.autocast("cpu") does: each floating operand but a float64
    one is cast first (a recorded cast whose gradient casts back, so float32 parameters get
    float32 gradients) and the product's result is in `dtype`. The losses take float32;
    every other op runs in the dtype its operands promote to. On a CPU with bfloat16 dot
    products (AVX512_BF16) such a product runs about twice as fast as in float32.

        with lt.autocast("cpu", dtype=lt.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()

    Also a decorator. The state is per thread and part of every trace cache's key
    (assume_pure, compile, a pure scan): a function traced under autocast is traced again
    without it. cache_enabled is accepted for torch's signature; casts of one weight within a
    graph are merged anyway."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        if device_type != "cpu":
            raise ValueError(f"[autocast] lazytrace runs on the CPU: device_type must be 'cpu', "
                             f"got {device_type!r}")
        if dtype is None:
            dtype = _C.dtype.bfloat16
        if not isinstance(dtype, _C.dtype):
            raise TypeError(f"[autocast] dtype must be lazytrace.bfloat16 or lazytrace.float16, "
                            f"got {type(dtype).__name__} {dtype!r}")
        if dtype not in _LOWER:
            raise ValueError(f"[autocast] dtype must be bfloat16 or float16 (the products' lower "
                             f"precision), got {dtype.name}")
        if not isinstance(enabled, bool):
            raise TypeError(f"[autocast] enabled must be a bool, got {type(enabled).__name__}")
        if cache_enabled is not None and not isinstance(cache_enabled, bool):
            raise TypeError(f"[autocast] cache_enabled must be a bool or None, got "
                            f"{type(cache_enabled).__name__}")
        self.device_type, self.fast_dtype, self.enabled = device_type, dtype, enabled
        self._guards = threading.local()  # per thread, one per block entered (nesting)

    def __enter__(self):
        stack = self._guards.__dict__.setdefault("stack", [])
        stack.append(_C._AutocastGuard(self.enabled, self.fast_dtype))
        return self

    def __exit__(self, *exc):
        self._guards.stack.pop()  # the guard's end restores the state before it
        return False

    def __call__(self, fn):
        enabled, dtype = self.enabled, self.fast_dtype

        @functools.wraps(fn)
        def run(*args, **kwargs):
            guard = _C._AutocastGuard(enabled, dtype)  # noqa: F841 (held for the call)
            try:
                return fn(*args, **kwargs)
            finally:
                del guard

        return run


def is_autocast_enabled(device_type="cpu"):
    """Whether autocast is on on this thread (for the CPU: lazytrace has no other device)."""
    return device_type == "cpu" and _C.is_autocast_enabled()


def get_autocast_dtype(device_type="cpu"):
    """The dtype products run in under autocast on this thread."""
    return _C.get_autocast_dtype()
