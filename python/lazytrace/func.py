"""torch.func.functional_call."""

import collections.abc
import contextlib

from ._lazytrace import Tensor
from .nn.module import Module, _changed


def _merge(parameter_and_buffer_dicts):
    given = parameter_and_buffer_dicts
    if isinstance(given, collections.abc.Mapping):
        return given
    if not isinstance(given, (tuple, list)):
        bad = type(given).__name__
    else:
        bad = next((f"{type(given).__name__} holding {type(d).__name__} at {i}"
                    for i, d in enumerate(given) if not isinstance(d, collections.abc.Mapping)),
                   None)
    if bad is not None:
        raise TypeError(f"[functional_call] parameter_and_buffer_dicts must be a dict of name -> "
                        f"Tensor, or a tuple of such dicts (params, buffers), got {bad}")
    merged = {}
    for d in given:
        for k, v in d.items():
            if k in merged:
                raise ValueError(
                    f"[functional_call] '{k}' appears in more than one of the dicts passed"
                )
            merged[k] = v
    return merged


def _owner(module, name):  # the module holding a dotted name's tensor, and its own name
    *path, leaf = name.split(".")
    for p in path:
        sub = module._modules.get(p) if hasattr(module, "_modules") else None
        if sub is None:
            return None, leaf
        module = sub
    return module, leaf


def _slots(module):
    """Every (store dict, key) holding a parameter or buffer, under each of its names (a tied
    weight has several), by dotted name."""
    out = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        for store in ("_parameters", "_buffers"):
            d = m.__dict__[store]
            for k, t in d.items():
                if t is not None:
                    out[prefix + ("." if prefix else "") + k] = (d, k, t)
    return out


@contextlib.contextmanager
def _reparametrize(module, tensors, strict, tie_weights):
    slots = _slots(module)
    if strict:
        missing = sorted(set(slots) - set(tensors))
        unexpected = sorted(set(tensors) - set(slots))
        if missing or unexpected:
            raise ValueError(f"[functional_call] strict: missing {missing}, unexpected {unexpected}")
    by_id = {}  # tied weights: every name of a replaced tensor takes the replacement
    for name, (_, _, t) in slots.items():
        by_id.setdefault(id(t), []).append(name)
    plan = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"[functional_call] '{name}' must be a Tensor, got {type(t).__name__}")
        if name not in slots:
            raise ValueError(
                f"[functional_call] '{name}' names no parameter or buffer of {type(module).__name__}"
            )
        for alias in by_id[id(slots[name][2])] if tie_weights else [name]:
            if alias == name or alias not in tensors:
                plan[alias] = t
    saved = []
    try:
        for name, t in plan.items():
            d, k, old = slots[name]
            saved.append((d, k, old))
            d[k] = t
        if saved:
            _changed()
        yield
    finally:
        for d, k, old in reversed(saved):
            d[k] = old
        if saved:
            _changed()


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, strict=False,
                    *, tie_weights=True):
    """module(*args, **kwargs) with its parameters and buffers replaced by the given tensors
    for the call (torch.func.functional_call): a dict, or a tuple of dicts (params, buffers).
    Names missing from the dicts keep the module's own tensors (unless strict)."""
    if not isinstance(module, Module):
        raise TypeError(f"[functional_call] module must be a lazytrace.nn.Module, got "
                        f"{type(module).__name__}")
    tensors = _merge(parameter_and_buffer_dicts)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    if kwargs is not None and not isinstance(kwargs, collections.abc.Mapping):
        raise TypeError(f"[functional_call] kwargs must be a dict of keyword arguments or None, "
                        f"got {type(kwargs).__name__}")
    with _reparametrize(module, tensors, strict, tie_weights):
        return module(*args, **(kwargs or {}))
