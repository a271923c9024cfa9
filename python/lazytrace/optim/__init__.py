"""torch.optim.SGD and AdamW over the C++ optimizers: step() records the update lazily (one
graph with the forward and backward, cached from the second step on), and the learning
rate is a tensor the update reads, so changing param_groups[i]["lr"] never recompiles."""

import collections.abc
import numbers

from .. import _lazytrace as _C
from .._lazytrace import Tensor
from ..nn.parameter import _OPTIMIZED


def _number(op, name, value):
    """value (a hyperparameter) as a float, keeping value itself; else a TypeError naming op."""
    if not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise TypeError(f"[{op}] {name} must be a number, got {type(value).__name__} {value!r}")


class _ParamGroup(dict):
    """One of param_groups: a dict whose "lr" reaches the optimizer as soon as it is set, so
    that a step traced once by compile (which replays without running step() in Python) reads
    each new rate, as a scheduler's group["lr"] = ... expects."""

    def __init__(self, group, impl, name):
        super().__init__(group)
        self._impl = impl
        self._name = name

    def __setitem__(self, key, value):
        if key == "lr":
            self._set_lr(value)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):  # pickled and copied as the plain dict it is to torch
        return (dict, (dict(self),))

    def _set_lr(self, lr):
        try:
            value = float(lr)
        except (TypeError, ValueError):
            raise TypeError(
                f"[{self._name}] param_groups[...]['lr'] must be a number, got {type(lr).__name__}"
            ) from None
        if not value >= 0:
            raise ValueError(f"[{self._name}] param_groups[...]['lr'] must be >= 0, got {lr}")
        if value != self._impl.lr:
            self._impl.lr = value


class Optimizer:
    _fixed = ()  # hyperparameters the C++ optimizer was made with; only lr may change later

    def __init__(self, params, defaults):
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of Tensors or of dicts, got a Tensor")
        if not isinstance(params, collections.abc.Iterable) or isinstance(params, (str, dict)):
            raise TypeError(f"[{name}] params must be an iterable of Tensors or of dicts (param "
                            f"groups), got {type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for i, g in enumerate(params):
            if isinstance(g, dict) != isinstance(params[0], dict):
                raise TypeError(f"[{name}] params must be all Tensors or all dicts (param groups), "
                                f"got {type(params[0]).__name__} at 0 and {type(g).__name__} at {i}")
        for i, g in enumerate(groups):
            if "params" not in g:
                raise ValueError(f"[{name}] param group {i} has no 'params': give each group as "
                                 "{'params': [tensors], ...hyperparameters}")
        self.defaults = dict(defaults)
        self.param_groups = []
        self._impls = []
        seen = set()
        for g in groups:
            group = dict(self.defaults)
            group.update(g)
            if isinstance(group["params"], Tensor):  # one tensor, as torch takes it
                group["params"] = [group["params"]]
            elif not isinstance(group["params"], collections.abc.Iterable):
                raise TypeError(f"[{name}] a param group's 'params' must be an iterable of "
                                f"Tensors, got {type(group['params']).__name__}")
            group["params"] = list(group["params"])
            for p in group["params"]:
                if not isinstance(p, Tensor):
                    raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
            if len(self.param_groups) and any(id(p) in seen for p in group["params"]):
                raise ValueError(f"[{name}] some parameters appear in more than one parameter "
                                 "group; give each parameter to one group")
            seen.update(id(p) for p in group["params"])
            self._check(group)
            for p in group["params"]:
                try:
                    _OPTIMIZED[id(p)] = p
                except TypeError:  # not weakly referenceable: never a Module's Parameter
                    pass
            impl = self._make(group)
            group = _ParamGroup(group, impl, type(self).__name__)
            group["_made_with"] = {k: group[k] for k in self._fixed}
            self.param_groups.append(group)
            self._impls.append(impl)

    def _check(self, group):
        """A group's hyperparameters (the defaults, or its own): a TypeError or ValueError
        naming what is wrong."""

    def _make(self, group):
        raise NotImplementedError

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, impl in zip(self.param_groups, self._impls):
            for k, v in group["_made_with"].items():
                if group[k] != v:
                    raise ValueError(
                        f"[{type(self).__name__}] param_groups[...]['{k}'] changed from {v} to "
                        f"{group[k]}; only 'lr' can change after the optimizer is made "
                        "(make a new optimizer for other changes)"
                    )
            group._set_lr(group["lr"])  # where dict methods bypassed __setitem__
            impl.step()
        return loss

    @property
    def state(self):
        """torch's optimizer.state: {parameter: {"step", "exp_avg", ...}}, copies of the
        optimizer's own tensors (read them; load_state_dict writes them)."""
        out = {}
        for group, impl in zip(self.param_groups, self._impls):
            for p, s in zip(group["params"], impl.state()):
                out[p] = s
        return out

    def state_dict(self):
        """torch's form: {"state": {index: {"step", "exp_avg", "exp_avg_sq"} (AdamW) or
        {"step", "momentum_buffer"} (SGD with momentum)}, "param_groups": [the
        hyperparameters, "params": indices]}; the tensors are copies (pickle it to save)."""
        state, groups, at = {}, [], 0
        for group, impl in zip(self.param_groups, self._impls):
            for i, s in enumerate(impl.state()):
                state[at + i] = s
            n = len(group["params"])
            saved = {k: v for k, v in group.items() if k != "params" and not k.startswith("_")}
            groups.append(dict(saved, params=list(range(at, at + n))))
            at += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Resumes from a state_dict() of an optimizer of the same kind over the same
        parameters: moments and step counts, and each group's lr and other entries (a
        scheduler's initial_lr); the hyperparameters fixed at construction must be the ones
        this optimizer was made with."""
        name = type(self).__name__
        if not isinstance(state_dict, collections.abc.Mapping) or not {
                "state", "param_groups"} <= set(state_dict):
            raise TypeError(f"[{name}] load_state_dict expects a dict with 'state' and "
                            f"'param_groups' (what state_dict() gives), got "
                            f"{type(state_dict).__name__}"
                            + (f" with keys {sorted(map(str, state_dict))}"
                               if isinstance(state_dict, collections.abc.Mapping) else ""))
        groups, state = state_dict["param_groups"], state_dict["state"]
        if not isinstance(groups, (list, tuple)) or not all(
                isinstance(g, collections.abc.Mapping) and isinstance(
                    g.get("params"), (list, tuple)) for g in groups):
            raise TypeError(f"[{name}] load_state_dict: 'param_groups' must be a list of dicts, "
                            "each with 'params' (a list of parameter indices), got "
                            f"{type(groups).__name__}")
        if not isinstance(state, collections.abc.Mapping) or not all(
                isinstance(s, collections.abc.Mapping) for s in state.values()):
            raise TypeError(f"[{name}] load_state_dict: 'state' must be a dict of parameter index "
                            f"-> dict of state tensors, got {type(state).__name__}")
        if len(groups) != len(self.param_groups):
            raise ValueError(f"[{name}] load_state_dict got {len(groups)} parameter groups for "
                             f"{len(self.param_groups)}")
        for i, (saved, group) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"[{name}] load_state_dict: group {i} has "
                                 f"{len(saved['params'])} parameters saved for "
                                 f"{len(group['params'])}")
            for k in self._fixed:
                if k in saved and saved[k] != group[k]:
                    raise ValueError(
                        f"[{name}] load_state_dict: group {i}'s {k} was {saved[k]} where this "
                        f"optimizer has {group[k]}; make the optimizer with the saved "
                        "hyperparameters")
        for saved, group, impl in zip(groups, self.param_groups, self._impls):
            # a parameter without saved state (never updated: torch leaves it out) starts with
            # zero moments; its step count is the one it shares with those updated with it
            fresh = [{k: _C.zeros(tuple(v.shape), v.dtype) for k, v in s.items()}
                     for s in impl.state()]
            impl.load_state([_state_tensors(name, j, state[j]) if j in state else fresh[i]
                             for i, j in enumerate(saved["params"])])
            for k, v in saved.items():  # lr, and what schedulers keep there (initial_lr)
                if k != "params" and k not in self._fixed:
                    group[k] = v

    def zero_grad(self, set_to_none=True):
        """Resets the parameters' gradients: to None (set_to_none=True), or each existing
        gradient to zeros in place (set_to_none=False; a None gradient stays None)."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None or set_to_none:
                    p.grad = None
                    continue
                if g.requires_grad:
                    g = g.detach()
                    p.grad = g
                g.zero_()

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if not k.startswith("_") and k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines + [")"])


def _state_tensors(name, j, s):
    """Parameter j's saved state as the C++ optimizer loads it: tensors; a number "step"
    (torch's older form, and what a hand-written state has) becomes a float64 0-d tensor."""
    out = {}
    for k, v in s.items():
        if not isinstance(v, Tensor):
            if k == "step" and isinstance(v, numbers.Real) and not isinstance(v, bool):
                v = _C.full((), float(v), _C.dtype.float64)
            else:
                raise TypeError(f"[{name}] load_state_dict: parameter {j}'s state {k!r} must be a "
                                f"Tensor, got {type(v).__name__}")
        out[k] = v
    return out


class SGD(Optimizer):
    """torch.optim.SGD: lr, momentum, dampening, weight_decay (L2), nesterov."""

    _fixed = ("momentum", "dampening", "weight_decay", "nesterov")

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        self._check(dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov))
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _check(self, g):
        lr, momentum, weight_decay = (_number("SGD", k, g[k])
                                      for k in ("lr", "momentum", "weight_decay"))
        dampening = _number("SGD", "dampening", g["dampening"])
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"[SGD] lr, momentum and weight_decay must be >= 0, got {g['lr']}, "
                             f"{g['momentum']}, {g['weight_decay']}")
        if g["nesterov"] and (momentum <= 0 or dampening != 0):
            raise ValueError("[SGD] nesterov needs a momentum and zero dampening")

    def _make(self, g):
        return _C._SGD(g["params"], float(g["lr"]), float(g["momentum"]), float(g["dampening"]),
                       float(g["weight_decay"]), bool(g["nesterov"]))


class AdamW(Optimizer):
    """torch.optim.AdamW (decoupled weight decay), one fused update per parameter."""

    _fixed = ("betas", "eps", "weight_decay")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        if amsgrad:
            raise ValueError("[AdamW] amsgrad is not supported")
        self._check(dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def _check(self, g):
        lr, eps = _number("AdamW", "lr", g["lr"]), _number("AdamW", "eps", g["eps"])
        _number("AdamW", "weight_decay", g["weight_decay"])
        betas = g["betas"]
        if isinstance(betas, (str, bytes)) or not isinstance(betas, collections.abc.Sequence):
            raise TypeError(f"[AdamW] betas must be a pair (beta1, beta2) of numbers in [0, 1), "
                            f"got {type(betas).__name__} {betas!r}")
        if len(betas) != 2:
            raise ValueError(f"[AdamW] betas must be a pair (beta1, beta2) of numbers in [0, 1), "
                             f"got {len(betas)} values {tuple(betas)}")
        b1, b2 = (_number("AdamW", "betas[%d]" % i, b) for i, b in enumerate(betas))
        for name, value, ok in (("lr", lr, lr >= 0), ("eps", eps, eps >= 0),
                                ("betas[0]", b1, 0 <= b1 < 1), ("betas[1]", b2, 0 <= b2 < 1)):
            if not ok:
                want = "in [0, 1)" if name.startswith("betas") else ">= 0"
                raise ValueError(f"[AdamW] {name} must be {want}, got {value}")

    def _make(self, g):
        b1, b2 = g["betas"]
        return _C._AdamW(g["params"], float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                         float(g["weight_decay"]))


from . import lr_scheduler  # noqa: E402  (after Optimizer, which it imports)
