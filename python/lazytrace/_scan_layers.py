"""scan_layers over Python modules: the layers' parameters and buffers are stacked and one
layer's forward is scanned over them (torch_xla.experimental.scan_layers)."""

import weakref

from . import _lazytrace as _C
from ._tensor import arange, stack

# the scan bodies of each template layer, kept while the layer lives: with is_layer_pure the
# C++ cache keys on the body's identity
_BODIES = weakref.WeakKeyDictionary()
_COUNT = "_layer"  # weightless layers scan over their indices


def _body_for(layer):
    # one body per train()/eval() state of the layer's modules: a traced body kept for
    # is_layer_pure has the state it was traced in (dropout on or off) built in
    bodies = _BODIES.setdefault(layer, {})
    modes = tuple(m.training for m in layer.modules())
    body = bodies.get(modes)
    if body is None:
        ref = weakref.ref(layer)

        def body(carry, x):
            from .func import functional_call

            args = carry if isinstance(carry, tuple) else (carry,)
            weights = {k: v for k, v in x.items() if k != _COUNT}
            return functional_call(ref(), weights, args), None

        bodies[modes] = body
    return body


def _named(layer, kind):
    return dict(layer.named_parameters() if kind == "parameter" else layer.named_buffers())


def scan_layers(layers, input_data, is_layer_pure=False, remat="save"):
    """Runs input_data through each layer in turn, as `for l in layers: x = l(x)`, with the
    layer traced and compiled once: the layers must have the same parameter and buffer
    names, shapes and dtypes (layers without weights are fine). A tuple input_data is passed
    unpacked (forward(*input_data)) and each layer returns the next one. is_layer_pure keeps
    the traced layer across calls; remat as in scan."""
    layers = list(layers)
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
    carry, _ = _C.scan(_body_for(first), input_data, xs, is_layer_pure, False, remat,
                       "scan_layers")
    return carry
