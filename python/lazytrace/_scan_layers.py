"""scan_layers over Python modules: the layers' parameters and buffers are stacked and one
layer's forward is scanned over them (torch_xla.experimental.scan_layers)."""

import weakref

import numpy as np

from . import _lazytrace as _C
from . import _modes
from ._tensor import Tensor, arange, stack
from ._tools import _clipped_repr
from .nn.module import Module, settings_version

# the scan bodies of each template layer, kept while the layer lives: with is_layer_pure the
# C++ cache keys on the body's identity
_BODIES = weakref.WeakKeyDictionary()
_BODIES_PER_LAYER = 8  # the settings met most recently, each with its body
_COUNT = "_layer"  # weightless layers scan over their indices

# a module's __dict__ entries that are not its settings: the registries (the tensors are
# scanned, the submodules walked) and lazytrace's own bookkeeping ("_lazytrace_...")
_NOT_SETTINGS = frozenset(("_parameters", "_buffers", "_modules", "_non_persistent"))
_ABSENT = object()


class _Class:
    """A module's class among its settings (compared by identity)."""

    __slots__ = ("cls",)

    def __init__(self, cls):
        self.cls = cls

    def __eq__(self, other):
        return isinstance(other, _Class) and other.cls is self.cls

    __hash__ = None

    def __repr__(self):
        return f"a {self.cls.__name__}"


def _settings(layer):
    """Everything of `layer` but its tensors that its forward may read, by path: each
    module's class, its train()/eval() flag and its plain attributes, and which submodules
    it has. scan_layers runs layer 0's forward on every layer's weights, so these must agree
    from layer to layer."""
    out = {}
    active = set()

    def walk(m, prefix):
        out[prefix + "<class>"] = _Class(type(m))
        if id(m) in active:  # a module that contains itself: its settings are on record
            return
        active.add(id(m))
        d = m.__dict__
        registries = [d.get(k) or {} for k in ("_parameters", "_buffers", "_modules")]
        out[prefix + "training"] = m.training  # through the property: an enclosing trace sees it
        for key in sorted(k for k in d if isinstance(k, str)):
            if key in _NOT_SETTINGS or key.startswith("_lazytrace_") or any(
                    key in r for r in registries):
                continue
            out[prefix + key] = d[key]
        for name, sub in registries[2].items():
            if sub is None:
                out[prefix + name] = None
            else:
                walk(sub, prefix + name + ".")
        active.discard(id(m))

    walk(layer, "")
    return out


def _same(a, b, own=None):
    """Whether two settings are alike: equal by ==, where == gives a plain bool. Values it
    cannot compare so (tensors, arrays) differ unless they are the same object; containers are
    compared item by item; a method bound to the layer's own module matches the same method
    bound to the other layer's."""
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    if type(a) is not type(b):
        if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)) and \
                not isinstance(a, bool) and not isinstance(b, bool):
            pass  # 1 == 1.0: compared by value below
        else:
            return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, own) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k], own) for k in a)
    self_a, self_b = getattr(a, "__self__", _ABSENT), getattr(b, "__self__", _ABSENT)
    if own is not None and self_a is not _ABSENT and (id(self_a), id(self_b)) in own:
        return getattr(a, "__func__", None) is getattr(b, "__func__", _ABSENT)
    try:
        r = a == b
    except Exception:
        return False
    if isinstance(r, bool):
        return r
    if isinstance(r, np.bool_):
        return bool(r)
    return False  # not comparable with ==: differ unless the same object


def _show(value):
    if isinstance(value, Tensor):
        return f"a tensor {value.type_str()} (not a parameter or buffer)"
    if value is _ABSENT:
        return "(not set)"
    return _clipped_repr(value, 80)


def _check_alike(layers, settings):
    """A ValueError naming the first setting in which a layer differs from layer 0."""
    ref = settings[0]
    first = layers[0]
    for i, got in enumerate(settings[1:], start=1):
        pairs = {(id(m0), id(mi)) for m0, mi in _module_pairs(first, layers[i])}
        for path in list(ref) + [p for p in got if p not in ref]:
            a, b = ref.get(path, _ABSENT), got.get(path, _ABSENT)
            if _same(a, b, pairs):
                continue
            fix = ("scan_layers runs layer 0's forward, with layer 0's settings, on every "
                   "layer's weights (only parameters and buffers are taken per layer), so the "
                   "layers must be alike in everything else: make them alike (the same "
                   "constructor arguments and attributes, all in train() or all in eval()), "
                   "or run them as a loop: `for l in layers: x = l(x)`")
            if path.endswith("<class>"):
                where = path[:-len("<class>")].rstrip(".")
                what = f"submodule '{where}'" if where else "class"
                raise ValueError(f"[scan_layers] layer {i}'s {what} is {_show(b)} but layer 0's "
                                 f"is {_show(a)}; {fix}")
            raise ValueError(
                f"[scan_layers] layer {i} differs from layer 0 in '{path}': {_show(b)} in "
                f"layer {i}, {_show(a)} in layer 0; {fix}")


def _module_pairs(a, b, seen=None):
    """(module of layer 0, module of layer i) at the same path (for a method bound to the
    layer's own module, which matches the same method bound to the other layer's)."""
    seen = set() if seen is None else seen
    seen.add(id(a))
    out = [(a, b)]
    for (n0, s0), (n1, s1) in zip(a.__dict__.get("_modules", {}).items(),
                                  b.__dict__.get("_modules", {}).items()):
        if n0 == n1 and s0 is not None and s1 is not None and id(s0) not in seen:
            out += _module_pairs(s0, s1, seen)
    return out


# the layers whose settings were last found alike, while no module attribute was set since
# (nn.module.settings_version): a call with the same layers skips the walk over every layer
_ALIKE = {}  # ids of the layers -> (settings version, the layers held weakly, layer 0's)


def _alike_settings(layers):
    """Layer 0's settings, after checking that every layer's are alike (_check_alike)."""
    key = tuple(map(id, layers))
    version = settings_version()
    hit = _ALIKE.get(key)
    if hit is not None and hit[0] == version and all(
            r() is layer for r, layer in zip(hit[1], layers)):
        if _modes.tracing():  # an enclosing trace depends on the flags the walk reads
            for layer in layers:
                for m in layer.modules():
                    m.training  # noqa: B018  (the read is what counts)
        return hit[2]
    settings = [_settings(layer) for layer in layers]
    _check_alike(layers, settings)
    if len(_ALIKE) >= 16:
        _ALIKE.clear()
    # (the walk above reads train()/eval() flags: the version after it is the one to match)
    _ALIKE[key] = (settings_version(), [weakref.ref(layer) for layer in layers], settings[0])
    return settings[0]


def _body_for(layer, settings):
    # one body per settings of the layer (train()/eval() flags included): a traced body kept
    # for is_layer_pure has the settings it was traced with (dropout on or off) built in
    bodies = _BODIES.setdefault(layer, [])
    for known, body in bodies:
        if known.keys() == settings.keys() and all(
                _same(known[k], settings[k]) for k in settings):
            return body
    ref = weakref.ref(layer)

    def body(carry, x):
        from .func import functional_call

        args = carry if isinstance(carry, tuple) else (carry,)
        weights = {k: v for k, v in x.items() if k != _COUNT}
        return functional_call(ref(), weights, args), None

    bodies.append((_frozen(settings), body))
    del bodies[:-_BODIES_PER_LAYER]
    return body


def _frozen(settings):
    # containers copied (a list, dict or set attribute changed in place later is another
    # setting)
    def freeze(v):
        if type(v) is list:
            return [freeze(x) for x in v]
        if type(v) is dict:
            return {k: freeze(x) for k, x in v.items()}
        if type(v) is set:
            return set(v)
        return v

    return {k: freeze(v) for k, v in settings.items()}


def _named(layer, kind):
    return dict(layer.named_parameters() if kind == "parameter" else layer.named_buffers())


def _check_bool(name, value):
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"[scan_layers] {name} must be a bool (True or False), got "
                    f"{type(value).__name__} {_show(value)}")


def scan_layers(layers, input_data, is_layer_pure=False, remat="save"):
    """Runs input_data through each layer in turn, as `for l in layers: x = l(x)`, with the
    layer traced and compiled once: layer 0's forward runs on each layer's weights, so the
    layers must have the same parameter and buffer names, shapes and dtypes (layers without
    weights are fine) and be alike in everything else (class, submodules, attributes such as
    LayerNorm's eps or Dropout's p, train()/eval()); a ValueError names the first difference.
    A tuple input_data is passed unpacked (forward(*input_data)) and each layer returns the
    next one. is_layer_pure keeps the traced layer across calls (traced again when layer 0's
    settings change); remat as in scan."""
    is_layer_pure = _check_bool("is_layer_pure", is_layer_pure)
    if not isinstance(remat, str) or remat not in ("save", "recompute"):
        raise (ValueError if isinstance(remat, str) else TypeError)(
            f"[scan_layers] remat must be \"save\" or \"recompute\", got "
            f"{type(remat).__name__} {_show(remat)}")
    if isinstance(layers, Module) and not hasattr(type(layers), "__iter__"):
        raise TypeError(f"[scan_layers] layers must be a list of modules (or an nn.ModuleList), "
                        f"got a single {type(layers).__name__}: pass [layer]")
    try:
        layers = list(layers)
    except TypeError:
        raise TypeError(f"[scan_layers] layers must be a list of modules (or an nn.ModuleList), "
                        f"got {type(layers).__name__} {_show(layers)}") from None
    for i, layer in enumerate(layers):
        if not isinstance(layer, Module):
            raise TypeError(f"[scan_layers] layers[{i}] is a {type(layer).__name__}, not an "
                            "nn.Module: scan_layers stacks modules' parameters and buffers; "
                            "for a function over stacked tensors use scan")
    if not layers:
        return input_data
    first = layers[0]
    per_kind = []
    for kind in ("parameter", "buffer"):
        named = [_named(layer, kind) for layer in layers]  # each layer walked once
        ref = named[0]
        for i, got in enumerate(named[1:], start=1):
            layer = layers[i]
            if list(got) != list(ref):
                missing = [n for n in ref if n not in got]
                extra = [n for n in got if n not in ref]
                raise ValueError(
                    f"[scan_layers] layer {i} ({type(layer).__name__}) has {kind}s "
                    f"{list(got)} but layer 0 has {list(ref)} (missing {missing}, extra {extra}); "
                    "scan_layers needs layers with the same parameter and buffer names"
                )
            for name, t in got.items():
                r = ref[name]
                if t.shape != r.shape or t.dtype != r.dtype:
                    raise ValueError(
                        f"[scan_layers] layer {i} {kind} '{name}' is {t.type_str()} but layer 0's "
                        f"is {r.type_str()}; scan_layers needs layers of one shape"
                    )
        per_kind.append(named)
    for i, layer in enumerate(layers[1:], start=1):
        if type(layer) is not type(first):
            raise ValueError(
                f"[scan_layers] layer {i} is a {type(layer).__name__} but layer 0 is a "
                f"{type(first).__name__}: scan_layers runs layer 0's forward on every layer's "
                "weights, so the layers must be of one class")
    xs = {name: stack([n[name] for n in named]) for named in per_kind for name in named[0]}
    if not xs:  # weightless layers: something to count iterations by
        xs[_COUNT] = arange(len(layers))
    carry, _ = _C.scan(_body_for(first, _alike_settings(layers)), input_data, xs, is_layer_pure,
                       False, remat, "scan_layers")
    return carry
