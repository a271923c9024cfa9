"""torch.func.functional_call."""

import contextlib

from ._lazytrace import Tensor
from .nn.module import _changed


def _merge(parameter_and_buffer_dicts):
    if isinstance(parameter_and_buffer_dicts, dict):
        return parameter_and_buffer_dicts
    merged = {}
    for d in parameter_and_buffer_dicts:
        for k, v in d.items():
            if k in merged:
                raise ValueError(
                    f"[functional_call] '{k}' appears in more than one of the dicts passed"
                )
            merged[k] = v
    return merged


def _owner(module, name):
    *path, leaf = name.split(".")
    for p in path:
        sub = module._modules.get(p) if hasattr(module, "_modules") else None
        if sub is None:
            return None, leaf
        module = sub
    return module, leaf


@contextlib.contextmanager
def _reparametrize(module, tensors, strict):
    saved = []
    try:
        known = set(n for n, _ in module.named_parameters()) | set(
            n for n, _ in module.named_buffers()
        )
        if strict:
            missing = sorted(known - set(tensors))
            unexpected = sorted(set(tensors) - known)
            if missing or unexpected:
                raise ValueError(
                    f"[functional_call] strict: missing {missing}, unexpected {unexpected}"
                )
        for name, t in tensors.items():
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"[functional_call] '{name}' must be a Tensor, got {type(t).__name__}"
                )
            owner, leaf = _owner(module, name)
            if owner is None or name not in known:
                raise ValueError(
                    f"[functional_call] '{name}' names no parameter or buffer of "
                    f"{type(module).__name__}"
                )
            for store in ("_parameters", "_buffers"):
                d = owner.__dict__[store]
                if leaf in d:
                    saved.append((d, leaf, d[leaf]))
                    d[leaf] = t
                    _changed()
                    break
            else:
                raise ValueError(
                    f"[functional_call] '{name}' names no parameter or buffer of "
                    f"{type(module).__name__}"
                )
        yield
    finally:
        for d, leaf, old in reversed(saved):
            d[leaf] = old
        if saved:
            _changed()


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with its parameters and buffers replaced by the given tensors
    for the call (torch.func.functional_call): a dict, or a tuple of dicts (params, buffers).
    Names missing from the dicts keep the module's own tensors (unless strict)."""
    tensors = _merge(parameter_and_buffer_dicts)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize(module, tensors, strict):
        return module(*args, **(kwargs or {}))
