"""The spec's tools over the C++ ones: assume_pure, compile, scan, while_loop, fori_loop,
and grad mode. Each Python function is traced once per signature by the C++ caches; the
argument binding (inspect.signature, defaults applied) happens here."""

import functools
import inspect
import operator
import types
import weakref

from . import _lazytrace as _C
from . import _modes
from ._tensor import Tensor, arange

_EMPTY = inspect.Parameter.empty
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class _Binder:
    """Binds a call's arguments as inspect.signature does, with defaults applied, so that
    f(a, b) and f(a, b, c=42) give the same arguments (and share a trace). Plain positional
    calls skip inspect."""

    def __init__(self, fn):
        try:
            self.sig = inspect.signature(fn)
        except (TypeError, ValueError):
            self.sig = None
        params = list(self.sig.parameters.values()) if self.sig else []
        self.simple = self.sig is not None and all(p.kind in _POSITIONAL for p in params)
        self.n = len(params)
        self.defaults = tuple(p.default for p in params)

    def bind(self, args, kwargs):
        if self.simple and not kwargs:
            if len(args) == self.n:
                return args, {}
            if len(args) < self.n and _EMPTY not in self.defaults[len(args):]:
                return args + self.defaults[len(args):], {}
        if self.sig is None:
            return args, kwargs
        bound = self.sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, bound.kwargs


class _Traced:
    """A function called through a C++ trace cache (assume_pure, compile). Its traces are
    keyed also on the train()/eval() flags it read (_modes)."""

    def __init__(self, fn, cache, call):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._binder = _Binder(fn)
        self._cache = cache
        self._call = call
        self._modes = _modes.Guard()

    def __call__(self, *args, **kwargs):
        args, kwargs = self._binder.bind(args, kwargs)
        return self._call(self._fn, args, kwargs, self._modes, self._modes.call_key())

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)


def assume_pure(fn=None, *, name=None):
    """fn traced once per input signature, then recorded as one call node per call.

    The signature is the pytree structure of the arguments, each tensor's shape and dtype,
    and the values of int/float/bool/str arguments. Tensors fn closes over are lifted (each
    call reads their current value); random ops draw fresh numbers on each call; gradients
    flow to arguments and closed-over tensors. fn runs once per signature, its backward
    included. Reading a value inside (item(), sync()) is a RuntimeError."""
    if fn is None:
        return lambda f: assume_pure(f, name=name)
    cache = _C._FunctionCache("assume_pure", name or getattr(fn, "__qualname__", "assume_pure"))
    return _Traced(fn, cache, cache.call)


class _Compile:
    """lazytrace.compile(...) without a function: a decorator, or a context manager whose
    block runs as one graph."""

    def __init__(self, full_graph, name, max_different_graphs):
        self.full_graph = full_graph
        self.name = name
        self.max_different_graphs = max_different_graphs

    def __call__(self, fn):
        return compile(fn, self.full_graph, self.name, self.max_different_graphs)

    def __enter__(self):
        if self.full_graph:
            raise ValueError(
                "[compile] full_graph needs a function to trace; a with-block runs as plain "
                "code. Write @lazytrace.compile(full_graph=True) on a function instead")
        _C.sync_named(None, (self.name or "compiled") + "_clear_pending")
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            _C.sync_named(None, self.name or "compiled")
        return False


def compile(fn=None, full_graph=False, name=None, max_different_graphs=None):
    """fn as one compiled graph per call, like torch_xla.compile: what was pending is synced
    first, fn is recorded as one call of its traced body (traced once per signature; a whole
    training step with backward and an optimizer step is fine) and its results are synced.
    full_graph: a read of a value inside fn is an error (else such a fn runs as plain code).
    max_different_graphs=N: an (N+1)th signature is an error saying what differed.
    Gradients computed inside stay inside: a fn that runs backward() and neither updates
    the parameters nor returns their .grad raises (run the optimizer step inside too).
    Also a decorator (@compile(name=...)) and a context manager (with compile(): ...)."""
    if fn is None:
        return _Compile(full_graph, name, max_different_graphs)
    label = name or getattr(fn, "__name__", "compiled")
    if label == "<lambda>":
        label = "compiled"
    cache = _C._FunctionCache("compile", label, full_graph, max_different_graphs or 0)
    return _Traced(fn, cache, cache.call_compiled)


def scan(fn, init, xs, is_fn_pure=False, reverse=False, remat="save"):
    """jax.lax.scan: fn(carry, x) -> (new_carry, y) over the first dim of xs; returns
    (final_carry, ys), ys stacking each y. The body is traced and compiled once and the loop
    runs in the backend. carry, xs and y are pytrees (y may be None); tensors fn closes over
    are lifted and get gradients. is_fn_pure: reuse the traced body across calls with the
    same signature. remat: "save" keeps what the backward needs, "recompute" only the
    carries (recomputing each iteration in backward)."""
    if not is_fn_pure:  # traced at each call, with the flags of that call
        return _C.scan(fn, init, xs, False, reverse, remat, "scan")
    try:
        modes = _PURE_MODES.setdefault(fn, _modes.Guard())
    except TypeError:  # not weakly referenceable: no guard
        return _C.scan(fn, init, xs, True, reverse, remat, "scan")
    return _C.scan(fn, init, xs, True, reverse, remat, "scan", modes, modes.call_key())


# the train()/eval() flags each is_fn_pure scan body was seen to read, while it lives
_PURE_MODES = weakref.WeakKeyDictionary()


def while_loop(cond_fn, body_fn, carried_inputs):
    """Runs body_fn while cond_fn holds, in the backend. carried_inputs is a tuple passed
    unpacked: cond_fn(*carry) returns a bool tensor, body_fn(*carry) the next carry with the
    same structure, shapes and dtypes. Returns the final carry (a tuple). Not differentiable
    (use fori_loop with int bounds, or scan)."""
    return _C.while_loop(cond_fn, body_fn, carried_inputs)


def fori_loop(lower, upper, body_fn, init_val):
    """jax.lax.fori_loop: body_fn(i, val) -> val for i in [lower, upper). Python int bounds
    make it a scan (differentiable); tensor bounds a while_loop."""
    lower, upper = (b if isinstance(b, Tensor) else _as_index(b, name)
                    for b, name in ((lower, "lower"), (upper, "upper")))
    if isinstance(lower, int) and isinstance(upper, int):
        n = max(upper - lower, 0)
        if n == 0:
            return init_val
        carry, _ = _C.scan(
            lambda c, i: (body_fn(i, c), None), init_val, arange(lower, lower + n), False, False,
            "save", "fori_loop",
        )
        return carry
    bounds = []
    for name, b in (("lower", lower), ("upper", upper)):
        t = b if isinstance(b, Tensor) else _C.scalar(b, _C.dtype.int64)
        if t.dtype not in (_C.dtype.int64, _C.dtype.int32) or t.numel() != 1:
            raise ValueError(f"[fori_loop] tensor bounds must be integer scalars (int32 or int64), "
                             f"got {name} {t.type_str()}")
        bounds.append(t.reshape(()).to(_C.dtype.int64))
    lo, hi = bounds
    _, _, val = _C.while_loop(
        lambda i, h, v: i < h, lambda i, h, v: (i + 1, h, body_fn(i, v)), (lo, hi, init_val)
    )
    return val


def _as_index(b, name):
    try:
        return operator.index(b)  # an int, or NumPy's integers
    except TypeError:
        raise TypeError(f"[fori_loop] {name} must be an int or an integer scalar tensor, got "
                        f"{type(b).__name__} {b!r}") from None


def sync(tensors=None):
    """Computes every live pending tensor in one graph (torch_xla.sync()), or only these."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    _C.sync(None if tensors is None else list(tensors))


class _GradMode:
    """A context manager and decorator that sets grad mode on this thread and restores it."""

    enabled = False

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)  # the bare decorator form: @lt.no_grad

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self.enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        enabled = self.enabled

        def call(f, *args, **kwargs):
            prev = _C.is_grad_enabled()
            _C._set_grad_enabled(enabled)
            try:
                return f(*args, **kwargs)
            finally:
                _C._set_grad_enabled(prev)

        if inspect.isgeneratorfunction(fn):
            # as torch's: the mode holds while the generator's body runs, each resumption
            @functools.wraps(fn)
            def run_generator(*args, **kwargs):
                gen = call(fn, *args, **kwargs)
                try:
                    value = call(next, gen)
                    while True:
                        try:
                            sent = yield value
                        except GeneratorExit:
                            call(gen.close)
                            raise
                        except BaseException as e:  # thrown in: thrown into the body
                            value = call(gen.throw, e)
                        else:
                            value = call(gen.send, sent)
                except StopIteration as stop:
                    return stop.value

            return run_generator

        @functools.wraps(fn)
        def run(*args, **kwargs):
            return call(fn, *args, **kwargs)

        return run


class no_grad(_GradMode):
    """Ops record no gradient history inside (torch.no_grad); also a decorator."""

    enabled = False


class enable_grad(_GradMode):
    """Ops record gradient history again inside (torch.enable_grad); also a decorator."""

    enabled = True


class set_grad_enabled(_GradMode):
    """Sets grad mode now (torch.set_grad_enabled(False) as a statement); as a context
    manager or decorator, only for the block or the call."""

    def __new__(cls, mode):
        return object.__new__(cls)

    def __init__(self, mode):
        self.enabled = bool(mode)
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self.enabled)

    def __enter__(self):
        return self

    def __call__(self, fn):
        _C._set_grad_enabled(self.prev)  # a decorator sets the mode per call, not now
        return super().__call__(fn)
