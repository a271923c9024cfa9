"""The spec's tools over the C++ ones: assume_pure, compile, scan, while_loop, fori_loop,
and grad mode. Each Python function is traced once per signature by the C++ caches; the
argument binding (inspect.signature, defaults applied) happens here."""

import functools
import inspect
import operator
import types
import weakref

import numpy as np

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


# ---- what a function traced once may have seen of nn.Modules
#
# A function traced once (assume_pure, compile, scan with is_fn_pure) keeps the tensors it
# read through a Module's attributes. A copy_ into them is seen (they are lifted, read at
# each call); replacing a parameter, buffer or submodule is a structural change
# (nn/module.py: _structure_changed) that moves this epoch on, and the epoch is part of these
# tools' keys, so the next call traces again. The era changes as each such trace begins and
# ends: a module made within one era (being constructed) cannot have been seen by a trace.
_STRUCTURE_EPOCH = [0]
_TRACE_ERA = [object()]
_KEY_MASK = 0x7FFFFFFFFFFFFFFF


class _Guard(_modes.Guard):
    """A traced function's train()/eval() guard, which also marks where its traces begin and
    end (the C++ caches push it while they trace the function)."""

    __slots__ = ()

    def _push(self):
        _TRACE_ERA[0] = object()
        super()._push()

    def _pop(self):
        super()._pop()
        _TRACE_ERA[0] = object()


def _call_key(guard):
    """The Python part of a call's cache key: which train()/eval() flags the function read have
    flipped (0: none) and the module structure epoch."""
    k = guard.call_key()
    epoch = _STRUCTURE_EPOCH[0]
    if epoch:
        k = hash((k, epoch)) & _KEY_MASK | 1
    return k


def _clipped_repr(value, limit=60):
    """repr(value) cut to `limit` characters (for error messages; a failing repr is shown as
    <type object>)."""
    try:
        r = repr(value)
    except Exception:
        r = f"<{type(value).__name__} object>"
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _describe(value):
    if isinstance(value, Tensor):  # its type, not its values (no sync)
        return f"Tensor {value.type_str()}"
    return f"{type(value).__name__} {_clipped_repr(value)}"


def _check_callable(tool, what, fn, expected):
    if not callable(fn):
        raise TypeError(f"[{tool}] {what} must be callable ({expected}), got {_describe(fn)}")


def _check_bool(tool, name, value):
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"[{tool}] {name} must be a bool (True or False), got {_describe(value)}")


def _check_remat(tool, remat):
    if not isinstance(remat, str):
        raise TypeError(f"[{tool}] remat must be \"save\" or \"recompute\", got "
                        f"{_describe(remat)}")
    if remat not in ("save", "recompute"):
        raise ValueError(f"[{tool}] remat must be \"save\" or \"recompute\", got {remat!r}")
    return remat


class _Bound:
    """A traced method's state for one instance: its own cache and guard, and the function
    with the instance bound (held weakly: the instance's tensors are closed over, not kept)."""

    __slots__ = ("ref", "call", "modes", "fn", "_last_epoch")


class _Traced:
    """A function called through a C++ trace cache (assume_pure, compile). Its traces are
    keyed also on the train()/eval() flags it read (_modes) and on the module structure epoch.
    As a method (a class attribute: @assume_pure on a def in a class body, nn.Module.forward
    included) each instance has its own traces, its tensors closed over as a closure's are."""

    def __init__(self, fn, tool, make_call):
        if isinstance(fn, (staticmethod, classmethod)):
            kind = type(fn).__name__
            raise TypeError(f"[{tool}] got a {kind} object: put @{kind} above @lt.{tool} (the "
                            f"{kind} wraps the traced function, not the other way round)")
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._tool = tool
        self._binder = _Binder(fn)
        self._make_call = make_call  # a new C++ cache's call (one per instance of a method)
        self._call = make_call()
        self._modes = _Guard()
        self._last_epoch = None  # the structure epoch of its last call
        self._instances = {}  # id(instance) -> _Bound, while the instance lives

    def __call__(self, *args, **kwargs):
        args, kwargs = self._binder.bind(args, kwargs)
        return self._run(self, self._call, self._fn, args, kwargs, self._modes)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return types.MethodType(self._call_method, obj)

    def _call_method(self, obj, *args, **kwargs):
        state = self._bound(obj)
        args, kwargs = self._binder.bind((obj,) + args, kwargs)
        return self._run(state, state.call, state.fn, args[1:], kwargs, state.modes)

    def _run(self, holder, call, fn, args, kwargs, modes):
        epoch, last = _STRUCTURE_EPOCH[0], holder._last_epoch
        holder._last_epoch = epoch
        try:
            return call(fn, args, kwargs, modes, _call_key(modes))
        except RuntimeError as e:
            msg = str(e)
            if last is None or last == epoch or "max_different_graphs is" not in msg or \
                    "evicted" not in msg:
                raise
            # the C++ cache sees only the arguments, which are as before
            head = msg.split(": the signature is the same")[0]
            raise RuntimeError(
                f"{head}: an nn.Module parameter, buffer or submodule was replaced (or added, "
                "or removed) since the last call, and the function is traced again for the new "
                "structure. Make such changes before the first call (or copy_ new values into "
                "the existing tensors), or raise the limit.") from None

    def _bound(self, obj):
        key = id(obj)
        state = self._instances.get(key)
        if state is not None and state.ref() is obj:
            return state
        instances = self._instances

        def forget(ref, key=key):
            st = instances.get(key)
            if st is not None and st.ref is ref:
                del instances[key]

        try:
            ref = weakref.ref(obj, forget)
        except TypeError:
            raise TypeError(
                f"[{self._tool}] '{getattr(self._fn, '__qualname__', self._fn)}' is called as a "
                f"method of a "
                f"{type(obj).__name__}, which cannot be referenced weakly (its traces are kept "
                "per instance while it lives): add '__weakref__' to its __slots__, or decorate "
                "a function that takes the tensors as arguments") from None
        fn, tool = self._fn, self._tool

        def bound(*args, **kwargs):
            o = ref()
            if o is None:
                raise RuntimeError(f"[{tool}] the method's instance was freed while its "
                                   "traced call was still in use")
            return fn(o, *args, **kwargs)

        state = _Bound()
        state.ref = ref
        state.call = self._make_call()
        state.modes = _Guard()
        state.fn = bound
        state._last_epoch = None
        instances[key] = state  # a dead instance's entry is gone: its id gets a new state
        return state


def _check_name(tool, name):
    if name is not None and not isinstance(name, str):
        raise TypeError(f"[{tool}] name must be a str or None, got {_describe(name)}")


def assume_pure(fn=None, *, name=None):
    """fn traced once per input signature, then recorded as one call node per call.

    The signature is the pytree structure of the arguments, each tensor's shape and dtype,
    and the values of int/float/bool/str arguments. Tensors fn closes over are lifted (each
    call reads their current value); random ops draw fresh numbers on each call; gradients
    flow to arguments and closed-over tensors. fn runs once per signature, its backward
    included. Reading a value inside (item(), sync()) is a RuntimeError.
    Rebinding a Python global or closure variable (w = new_tensor) after the first trace is
    not seen, as in JAX: pass changing tensors as arguments, or copy_ into the tensor; a
    replaced nn.Module parameter, buffer or submodule is seen (the next call traces again).
    On a method (nn.Module.forward included) each instance is traced on its own, its
    tensors closed over."""
    _check_name("assume_pure", name)
    if fn is None:
        return lambda f: assume_pure(f, name=name)
    _check_callable("assume_pure", "fn", fn, "the function to trace; write @lt.assume_pure "
                    "on a def, or lt.assume_pure(f)")
    label = name or getattr(fn, "__qualname__", "assume_pure")
    return _Traced(fn, "assume_pure", lambda: _C._FunctionCache("assume_pure", label).call)


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
    the parameters nor returns their .grad raises (run the optimizer step inside too), and so
    does a call where a tensor its backward() reaches has a .grad from outside (eager code
    would add to it; zero_grad() before the call, or inside before backward()).
    Rebinding a Python global or closure variable (w = new_tensor) after the first trace is
    not seen, as in JAX: pass changing tensors as arguments, or copy_ into the tensor; a
    replaced nn.Module parameter, buffer or submodule is seen (the next call traces again).
    Also a decorator (@compile(name=...)), a method's decorator (each instance traced on its
    own) and a context manager (with compile(): ...)."""
    full_graph = _check_bool("compile", "full_graph", full_graph)
    _check_name("compile", name)
    if max_different_graphs is not None:
        if isinstance(max_different_graphs, bool) or not isinstance(max_different_graphs, int):
            raise TypeError("[compile] max_different_graphs must be a positive int (the number "
                            "of graphs allowed) or None (no limit), got "
                            f"{_describe(max_different_graphs)}")
        if max_different_graphs < 1:
            raise ValueError("[compile] max_different_graphs must be a positive int (the number "
                             f"of graphs allowed) or None (no limit), got {max_different_graphs}")
    if fn is None:
        return _Compile(full_graph, name, max_different_graphs)
    _check_callable("compile", "fn", fn, "the function to compile; write @lt.compile on a "
                    "def, lt.compile(f), or `with lt.compile():` around a block")
    label = name or getattr(fn, "__name__", "compiled")
    if label == "<lambda>":
        label = "compiled"
    limit = max_different_graphs or 0
    return _Traced(fn, "compile",
                   lambda: _C._FunctionCache("compile", label, full_graph, limit).call_compiled)


def scan(fn, init, xs, is_fn_pure=False, reverse=False, remat="save"):
    """jax.lax.scan: fn(carry, x) -> (new_carry, y) over the first dim of xs; returns
    (final_carry, ys), ys stacking each y. The body is traced and compiled once and the loop
    runs in the backend. carry, xs and y are pytrees (y may be None); tensors fn closes over
    are lifted and get gradients. is_fn_pure: reuse the traced body across calls with the
    same signature (rebinding a variable fn closes over is then not seen, as in JAX; a
    replaced nn.Module parameter, buffer or submodule is). remat: "save" keeps what the
    backward needs, "recompute" only the carries (recomputing each iteration in backward)."""
    _check_callable("scan", "fn", fn, "a function of (carry, x) returning (new_carry, y)")
    is_fn_pure = _check_bool("scan", "is_fn_pure", is_fn_pure)
    reverse = _check_bool("scan", "reverse", reverse)
    remat = _check_remat("scan", remat)
    if not is_fn_pure:  # traced at each call, with the flags of that call
        return _C.scan(fn, init, xs, False, reverse, remat, "scan")
    try:
        modes = _PURE_MODES.setdefault(fn, _Guard())
    except TypeError:  # not weakly referenceable: no train()/eval() guard kept
        modes = _Guard()
    return _C.scan(fn, init, xs, True, reverse, remat, "scan", modes, _call_key(modes))


# the train()/eval() flags each is_fn_pure scan body was seen to read, while it lives
_PURE_MODES = weakref.WeakKeyDictionary()


def while_loop(cond_fn, body_fn, carried_inputs):
    """Runs body_fn while cond_fn holds, in the backend. carried_inputs is a tuple passed
    unpacked: cond_fn(*carry) returns a bool tensor, body_fn(*carry) the next carry with the
    same structure, shapes and dtypes. Returns the final carry (a tuple). Not differentiable
    (use fori_loop with int bounds, or scan)."""
    _check_callable("while_loop", "cond_fn", cond_fn,
                    "a function of the carry returning a bool tensor")
    _check_callable("while_loop", "body_fn", body_fn,
                    "a function of the carry returning the next carry")
    return _C.while_loop(cond_fn, body_fn, carried_inputs)


_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def fori_loop(lower, upper, body_fn, init_val):
    """jax.lax.fori_loop: body_fn(i, val) -> val for i in [lower, upper). Python int bounds
    make it a scan (differentiable, i int64); tensor bounds a while_loop, where i has the
    bounds' dtype: int32 where both are int32 (a Python int bound that fits int32 takes the
    other's dtype, as JAX's weakly typed ints do), else int64."""
    _check_callable("fori_loop", "body_fn", body_fn,
                    "a function of (i, val) returning the next val")
    lower, upper = (b if isinstance(b, Tensor) else _as_index(b, name)
                    for b, name in ((lower, "lower"), (upper, "upper")))
    if isinstance(lower, int) and isinstance(upper, int):
        n = max(upper - lower, 0)
        if n > _INT64_MAX:
            raise ValueError(f"[fori_loop] the range [{lower}, {upper}) has more than 2**63 - 1 "
                             "iterations, more than the int64 loop index i can count; no loop "
                             "can run them all")
        if n == 0:
            return init_val
        carry, _ = _C.scan(
            lambda c, i: (body_fn(i, c), None), init_val, arange(lower, lower + n), False, False,
            "save", "fori_loop",
        )
        return carry
    tensors = {}
    for name, b in (("lower", lower), ("upper", upper)):
        if isinstance(b, Tensor):
            if b.dtype not in (_C.dtype.int64, _C.dtype.int32) or b.numel() != 1:
                raise ValueError(f"[fori_loop] tensor bounds must be integer scalars (int32 or "
                                 f"int64), got {name} {b.type_str()}")
            tensors[name] = b
    i32 = all(t.dtype == _C.dtype.int32 for t in tensors.values()) and all(
        _INT32_MIN <= b <= _INT32_MAX for b in (lower, upper) if isinstance(b, int))
    dt = _C.dtype.int32 if i32 else _C.dtype.int64
    lo, hi = (b.reshape(()).to(dt) if isinstance(b, Tensor) else _C.scalar(b, dt)
              for b in (lower, upper))

    def body(i, h, v):
        out = body_fn(i, v)
        _check_same_carry(v, out)
        return i + 1, h, out

    _, _, val = _C.while_loop(lambda i, h, v: i < h, body, (lo, hi, init_val))
    return val


def _check_same_carry(before, after):
    """fori_loop's body must keep val's structure, shapes and dtypes (named as the user wrote
    it, not as the while_loop slot it travels in)."""
    try:
        la, sa = _C.tree_flatten(before)
        lb, sb = _C.tree_flatten(after)
    except Exception:  # not a pytree: while_loop says what is wrong
        return
    def shown(spec):
        text = str(spec)
        return text[len("TreeSpec("):-1] if text.startswith("TreeSpec(") else text

    if str(sa) != str(sb):
        raise ValueError(f"[fori_loop] body_fn must return a val of init_val's structure "
                         f"{shown(sa)}, got {shown(sb)}; return the new val in the same "
                         "containers")
    for k, (a, b) in enumerate(zip(la, lb)):
        if a.shape != b.shape or a.dtype != b.dtype:
            where = "val" if shown(sa) == "*" else f"tensor {k} of val (structure {shown(sa)})"
            raise ValueError(
                f"[fori_loop] body_fn must return a val of init_val's shapes and dtypes, but "
                f"{where} {a.type_str()} became {b.type_str()}; cast the result (e.g. "
                f"v.to({a.dtype})), or give init_val the dtype the body computes in")


def _as_index(b, name):
    try:
        b = operator.index(b)  # an int, or NumPy's integers
    except TypeError:
        raise TypeError(f"[fori_loop] {name} must be an int or an integer scalar tensor, got "
                        f"{type(b).__name__} {b!r}") from None
    if not _INT64_MIN <= b <= _INT64_MAX:
        raise ValueError(f"[fori_loop] {name} = {b} is outside the int64 range "
                         "[-2**63, 2**63 - 1] of the loop index i; give bounds within it")
    return b


def sync(tensors=None):
    """Computes every live pending tensor in one graph (torch_xla.sync()), or these (keeping what
    it computes on the way that is still held elsewhere, as MLX's eval does)."""
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
