"""torch.autograd's functional gradient, and Function (a hand-written backward)."""

import functools

from . import _lazytrace as _C
from ._lazytrace import Tensor
from ._tools import no_grad as _no_grad


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


class FunctionCtx:
    """What forward leaves for backward (torch's ctx): save_for_backward(*tensors) and
    saved_tensors, needs_input_grad (a bool per forward input), mark_non_differentiable,
    and any attribute set on it."""

    _saved = ()
    _non_differentiable = ()
    needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"[save_for_backward] argument {i} is a {type(t).__name__}; save "
                                "tensors (or None) here and other values as attributes of ctx")
        self._saved = tensors

    @property
    def saved_tensors(self):
        # a saved output, in a backward: the output itself, whose history a create_graph
        # backward restores (forward saved it before it had one)
        now = self.__dict__.get("_outputs_now")
        if not now:
            return self._saved
        return tuple(now.get(id(t), t) for t in self._saved)

    def mark_non_differentiable(self, *outputs):
        """These outputs get no gradient history (backward receives zeros for them)."""
        self._non_differentiable = tuple(id(o) for o in outputs)


def once_differentiable(backward):
    """A backward that is not differentiable itself: run without recording (torch's)."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with _no_grad():
            return backward(ctx, *grads)

    return wrapper


class Function:
    """torch.autograd.Function: subclass it with static forward(ctx, *args) and backward(ctx,
    *grad_outputs) (or forward(*args) with setup_context(ctx, inputs, output)), and call
    YourFunction.apply(*args). forward runs without recording gradients; its tensor outputs
    get backward as their gradient rule, which receives one gradient per output and returns
    one per forward input (None for inputs without one). backward's ops are recorded
    lazily like any others, so it works inside compile, assume_pure and scan too."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("[Function] define a static forward(ctx, *args) in the subclass")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("[Function] define a static backward(ctx, *grad_outputs) in "
                                  "the subclass")

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"[{type(self).__name__}] a Function is not instantiated: call "
                           f"{type(self).__name__}.apply(*args)")

    @classmethod
    def apply(cls, *args, **kwargs):
        name = cls.__name__
        if kwargs:
            raise TypeError(f"[{name}] apply takes positional arguments only (as torch's)")
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        separate = cls.setup_context is not Function.setup_context
        with _no_grad():
            if separate:
                out = cls.forward(*args)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args)
        single = isinstance(out, Tensor)
        if not single and not isinstance(out, tuple):
            raise TypeError(f"[{name}] forward must return a Tensor or a tuple, got "
                            f"{type(out).__name__}")
        outs = [out] if single else list(out)
        in_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        skip = set(ctx._non_differentiable)
        diff = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and id(o) not in skip]
        if not diff or not _C.is_grad_enabled() or not any(ctx.needs_input_grad):
            return out
        # what backward gets for the other outputs (the closure holds no output: the outputs'
        # history holds it, and a cycle through C++ would hide them from Python's GC)
        others = {i: (o.shape, o.dtype) if isinstance(o, Tensor) else None
                  for i, o in enumerate(outs) if i not in diff}
        n_args = len(args)

        out_ids = [id(outs[i]) for i in diff]

        def vjp(grads, outputs):
            given = dict(zip(diff, grads))
            full = [given[i] if i in given else
                    None if others[i] is None else _C.zeros(others[i][0], others[i][1])
                    for i in range(len(others) + len(diff))]
            ctx._outputs_now = dict(zip(out_ids, outputs))
            try:
                gs = cls.backward(ctx, *full)
            finally:
                ctx._outputs_now = None
            gs = gs if isinstance(gs, tuple) else (gs,)
            if len(gs) < n_args or any(g is not None for g in gs[n_args:]):
                raise RuntimeError(f"[{name}] backward returned {len(gs)} gradients for the "
                                   f"{n_args} inputs of forward; return one per input (None "
                                   "where there is none)")
            for i, g in enumerate(gs[:n_args]):
                if g is not None and i not in in_pos:
                    raise RuntimeError(f"[{name}] backward returned a gradient for input {i}, "
                                       f"which is a {type(args[i]).__name__}, not a Tensor; "
                                       "return None there")
            return [gs[i] for i in in_pos]

        made = _C.custom_function(name + "Backward", [args[i] for i in in_pos],
                                  [outs[i] for i in diff], vjp)
        for i, t in zip(diff, made):
            outs[i] = t
        return outs[0] if single else tuple(outs)
