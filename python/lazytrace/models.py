"""A decoder-only transformer in Llama's shape, with the parameter names of the C++
lt::nn::DecoderLM (and of the `lazytrace` command line's weight files): pre-norm layers of
causal grouped-query attention with rotary positions and a SiLU-gated MLP."""

import dataclasses
import math
import numbers
import operator
from dataclasses import dataclass

from . import _lazytrace as _C
from ._scan_layers import scan_layers
from ._tensor import arange, stack, tensor, where
from ._tools import assume_pure, scan
from .func import _owner, functional_call
from .nn import Embedding, Linear, Module, ModuleList, Parameter, RMSNorm
from .nn import functional as F
from .nn.module import registry_version

_INT_FIELDS = ("vocab", "hidden", "intermediate", "heads", "kv_heads", "layers", "max_seq")
_FLOAT_FIELDS = ("rope_theta", "norm_eps")  # absent from files the C++ command line wrote


@dataclass
class DecoderConfig:
    vocab: int = 256
    hidden: int = 128
    intermediate: int = 512
    heads: int = 4
    kv_heads: int = 4
    layers: int = 4
    max_seq: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self):
        return self.hidden // self.heads

    def validate(self):
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"[DecoderConfig] {name} must be an int, got {type(v).__name__} "
                                f"{v!r}")
        for name in _FLOAT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"[DecoderConfig] {name} must be a number, got "
                                f"{type(v).__name__} {v!r}")
            if not (v > 0 if name == "rope_theta" else v >= 0):
                raise ValueError(f"[DecoderConfig] {name} must be "
                                 f"{'positive' if name == 'rope_theta' else '>= 0'}, got {v}")
        for name in _INT_FIELDS:
            if getattr(self, name) <= 0:
                raise ValueError(f"[DecoderConfig] {name} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"[DecoderConfig] hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"[DecoderConfig] heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"[DecoderConfig] rotary positions need an even head dim, got {self.head_dim}")


apply_rotary = _C.apply_rotary  # Llama's "rotate half" form, as the C++ decoder has it


class CausalSelfAttention(Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        kv = c.kv_heads * c.head_dim
        self.q_proj = Linear(c.hidden, c.hidden, bias=False)
        self.k_proj = Linear(c.hidden, kv, bias=False)
        self.v_proj = Linear(c.hidden, kv, bias=False)
        self.o_proj = Linear(c.hidden, c.hidden, bias=False)

    def forward(self, x):
        c = self.c
        b, t, _ = x.shape
        hd, nkv, rep = c.head_dim, c.kv_heads, c.heads // c.kv_heads

        def heads_first(y, n):  # [b, t, n*hd] -> [b, n, t, hd]
            return y.reshape(b, t, n, hd).permute(0, 2, 1, 3)

        q = apply_rotary(heads_first(self.q_proj(x), c.heads), c.rope_theta)
        k = apply_rotary(heads_first(self.k_proj(x), nkv), c.rope_theta)
        v = heads_first(self.v_proj(x), nkv)
        # the rep query heads of a group share one k/v head (broadcast, not copied)
        q5 = q.reshape(b, nkv, rep, t, hd)
        k5, v5 = k.unsqueeze(2), v.unsqueeze(2)
        scores = (q5 @ k5.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        causal = arange(t).unsqueeze(1) >= arange(t).unsqueeze(0)
        scores = where(causal, scores, float("-inf"))
        out = _C.softmax(scores, -1) @ v5
        out = out.reshape(b, c.heads, t, hd).permute(0, 2, 1, 3).reshape(b, t, c.hidden)
        return self.o_proj(out)


class GatedMLP(Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm = RMSNorm(c.hidden, eps=c.norm_eps)
        self.attn = CausalSelfAttention(c)
        self.mlp_norm = RMSNorm(c.hidden, eps=c.norm_eps)
        self.mlp = GatedMLP(c)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


class Decoder(Module):
    """Token ids [batch, seq] (int32/int64) to next-token logits [batch, seq, vocab].

    layers_mode picks how the layers run: "loop" (traced op by op), "assume_pure" (each layer
    one call node of a layer traced once) or "scan" (scan_layers: one loop node, the layer
    traced and compiled once; remat as scan_layers takes it).

    stacked=True (scan only) keeps the layers' weights stacked, [layers, ...] under one name
    each ("layers.attn.q_proj.weight"), as the C++ DecoderLM with stacked_layers and flax's
    nn.scan do: a training step then neither stacks nor unstacks them. The weights start equal
    to an unstacked model's of the same seed; save() and load() use per-layer names.

    The shape comes from `config` (a DecoderConfig) and/or keyword fields of DecoderConfig:
    Decoder(hidden=64, layers=2) or Decoder(config, layers=5), where the keywords override
    the config's fields (dataclasses.replace: the config passed in is not changed).

    copy.deepcopy and pickle give an independent model with the same weights; the traced
    layer functions cached by assume_pure and scan modes are not copied but rebuilt by the
    copy's first forward."""

    def __init__(self, config=None, layers_mode="loop", remat="save", stacked=False, **kwargs):
        super().__init__()
        fields = {f.name for f in dataclasses.fields(DecoderConfig)}
        unknown = sorted(set(kwargs) - fields)
        if unknown:
            raise TypeError(f"[Decoder] unknown keyword argument(s) {unknown}: pass a "
                            f"DecoderConfig and/or its fields {sorted(fields)}")
        if config is None:
            c = DecoderConfig(**kwargs)
        elif not isinstance(config, DecoderConfig):
            raise TypeError(f"[Decoder] config must be a DecoderConfig, got "
                            f"{type(config).__name__}; pass DecoderConfig(...) or keyword fields")
        else:  # keywords override the config's fields
            c = dataclasses.replace(config, **kwargs) if kwargs else config
        c.validate()
        if layers_mode not in ("loop", "assume_pure", "scan"):
            raise ValueError(f"[Decoder] layers_mode must be 'loop', 'assume_pure' or 'scan', got {layers_mode!r}")
        if stacked and layers_mode != "scan":
            raise ValueError("[Decoder] stacked weights need layers_mode='scan'")
        self.config, self.layers_mode, self.remat, self.stacked = c, layers_mode, remat, stacked
        self.embed = Embedding(c.vocab, c.hidden)
        layers = [DecoderLayer(c) for _ in range(c.layers)]
        if stacked:
            self.layers = layers[0]
            for name, _ in list(layers[0].named_parameters()):
                owner, leaf = _owner(layers[0], name)
                owner._parameters[leaf] = Parameter(
                    stack([dict(l.named_parameters())[name] for l in layers]))
            # computed now, with the per-layer weights they were stacked from: those may
            # outlive this call (until the cycle collector runs) and would otherwise be
            # computed by the first step's sync, a graph of its own
            _C.sync([p for l in layers for p in l.parameters()])
        else:
            self.layers = ModuleList(layers)
        self.norm = RMSNorm(c.hidden, eps=c.norm_eps)
        self.head = Linear(c.hidden, c.vocab, bias=False)
        self._pure_layer = None
        if stacked:  # one layer's shapes to run each slice, made last: the weights above are
            template = DecoderLayer(c)  # an unstacked model's
            # computed now: its weights are never trained, so no step's graph computes them
            _C.sync(list(template.parameters()))
            object.__setattr__(self, "_template", template)

    # traced functions (assume_pure's cache, scan's body closing over this model's template)
    # and a cache of parameter dicts: none can be pickled or belongs to a copy; a copy or an
    # unpickled model rebuilds them on its first forward
    _CACHES = ("_stacked_body", "_weights_cache")

    def __getstate__(self):
        base = getattr(super(), "__getstate__", None)  # Module's, or object's (Python 3.11+)
        state = base() if base is not None else self.__dict__
        if isinstance(state, dict):
            state = dict(state)
            for name in self._CACHES:
                state.pop(name, None)
            if "_pure_layer" in state:
                state["_pure_layer"] = None
        return state

    def _scan_stacked(self, h):
        template = self._template
        body = self.__dict__.get("_stacked_body")
        if body is None:
            def body(carry, weights):
                return functional_call(template, weights, (carry,)), None

            object.__setattr__(self, "_stacked_body", body)
        weights = dict(self.layers.named_parameters())
        out, _ = scan(body, h, weights, is_fn_pure=True, remat=self.remat)
        return out

    def per_layer_state_dict(self):
        """The weights under per-layer names ("layers.3.attn.q_proj.weight"), stacked or not."""
        sd = self.state_dict()
        if not self.stacked:
            return sd
        out = {}
        for k, v in sd.items():
            if k.startswith("layers."):
                for i in range(self.config.layers):
                    out[f"layers.{i}.{k[len('layers.'):]}"] = v[i]
            else:
                out[k] = v
        return out

    def load_per_layer_state_dict(self, sd, strict=True):
        """Loads weights under per-layer names (as per_layer_state_dict() gives them), stacked
        or not, as load_state_dict does: strict, the names must match exactly (a RuntimeError
        names the missing and unexpected keys); otherwise the IncompatibleKeys returned name
        them, per layer, and a weight (or a layer's slice of a stacked one) not given keeps
        its value. Everything is checked before anything is copied."""
        if not self.stacked:
            return self.load_state_dict(sd, strict=strict)
        own = self.state_dict(keep_vars=True)
        expected = []
        for k in own:
            if k.startswith("layers."):
                expected += [f"layers.{i}.{k[len('layers.'):]}" for i in range(self.config.layers)]
            else:
                expected.append(k)
        known = set(expected)
        missing = [k for k in expected if k not in sd]
        unexpected = [k for k in sd if k not in known]
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}: missing keys "
                f"{missing}, unexpected keys {unexpected}")
        merged = {k: v for k, v in sd.items() if k in known and not k.startswith("layers.")}
        for k, p in own.items():
            if not k.startswith("layers."):
                continue
            name, want = k[len("layers."):], tuple(p.shape[1:])
            slices = []
            for i in range(self.config.layers):
                key = f"layers.{i}.{name}"
                if key not in sd:  # (strict=False) this layer's slice keeps its value
                    slices.append(p.detach()[i])
                    continue
                v = sd[key]
                if tuple(v.shape) != want:
                    raise RuntimeError(
                        f"Error(s) in loading state_dict for {type(self).__name__}: size "
                        f"mismatch for {key}: copying a param with shape {tuple(v.shape)}, the "
                        f"shape in the current model is {want}")
                v = v if isinstance(v, _C.Tensor) else tensor(v)
                slices.append(v if v.dtype == p.dtype else v.to(p.dtype))
            merged[k] = stack(slices)
        result = self.load_state_dict(merged, strict=False)
        return type(result)(missing, unexpected)

    def run_layers(self, h):
        if self.stacked:
            return self._scan_stacked(h)
        if self.layers_mode == "scan":
            return scan_layers(self.layers, h, is_layer_pure=True, remat=self.remat)
        if self.layers_mode == "loop":
            for layer in self.layers:
                h = layer(h)
            return h
        if self._pure_layer is None:
            template = self.layers[0]
            self._pure_layer = assume_pure(
                lambda p, x: functional_call(template, p, (x,)), name="decoder_layer")
        for weights in self._layer_weights():
            h = self._pure_layer(weights, h)
        return h

    def _layer_weights(self):
        # each layer's parameters by name, remade only when some module's registry changed
        cached = self.__dict__.get("_weights_cache")
        if cached is None or cached[0] != registry_version():
            cached = (registry_version(), [dict(l.named_parameters()) for l in self.layers])
            object.__setattr__(self, "_weights_cache", cached)
        return cached[1]

    def forward(self, tokens):
        if tokens.ndim != 2 or tokens.dtype not in (_C.dtype.int32, _C.dtype.int64):
            raise ValueError(f"[Decoder] tokens must be int32 or int64 [batch, seq], got {tokens.type_str()}")
        if tokens.shape[1] > self.config.max_seq:
            raise ValueError(
                f"[Decoder] a sequence of {tokens.shape[1]} tokens is longer than max_seq = "
                f"{self.config.max_seq}")
        h = self.embed(tokens)
        return self.head(self.norm(self.run_layers(h)))


def _config_from_metadata(meta):
    if meta.get("format") != "lazytrace-decoder":
        raise ValueError(
            f"[models.load] the file's metadata has format {meta.get('format')!r}, not "
            "'lazytrace-decoder' (a file written by `lazytrace train` or models.save)")
    fields = {}
    for f in _INT_FIELDS + _FLOAT_FIELDS:
        if f in meta:
            try:
                fields[f] = (int if f in _INT_FIELDS else float)(meta[f])
            except ValueError:
                raise ValueError(f"[models.load] the file's metadata has a bad {f!r}: "
                                 f"{meta[f]!r}; fix or remove it") from None
    return DecoderConfig(**fields)


def _metadata(c):
    # repr of a float reads back as the same float (float(repr(x)) == x)
    return {"format": "lazytrace-decoder", **{k: str(int(getattr(c, k))) for k in _INT_FIELDS},
            **{k: repr(float(getattr(c, k))) for k in _FLOAT_FIELDS}}


def load(path, layers_mode="loop", remat="save", stacked=False):
    """A Decoder with the shape and weights of a file saved by `lazytrace train` (the C++
    DecoderLM's per-layer names) or by save()."""
    from . import _lazytrace

    model = Decoder(_config_from_metadata(_lazytrace.load_metadata(str(path))),
                    layers_mode=layers_mode, remat=remat, stacked=stacked)
    model.load_per_layer_state_dict(_lazytrace.load_file(str(path)))
    return model


def save(model, path):
    """Writes the model's weights and shape as `lazytrace train` does, plus its rope_theta and
    norm_eps (which the C++ command line does not read: it runs with the defaults)."""
    from . import _lazytrace

    _lazytrace.save_file(dict(model.per_layer_state_dict()), str(path), _metadata(model.config))


def generate(model, prompt, max_tokens):
    """Greedy bytes after `prompt` (a non-empty str, UTF-8 encoded), the likeliest byte each
    step, as `lazytrace generate --temperature 0` picks them (over a [1, max_seq] buffer).
    Returns the max_tokens new bytes as a latin-1 str (one character per byte).

    Tokens are bytes, so the model must be byte-level: vocab <= 256 (the command line's is
    256), and the prompt's bytes below vocab. The prompt and max_tokens together must fit
    in max_seq."""
    from ._tools import no_grad

    if not isinstance(prompt, str):
        raise TypeError(f"[models.generate] the prompt must be a str, got {type(prompt).__name__}")
    if isinstance(max_tokens, bool):
        raise TypeError("[models.generate] max_tokens must be an int, got a bool")
    try:
        max_tokens = operator.index(max_tokens)
    except TypeError:
        raise TypeError(f"[models.generate] max_tokens must be an int, got "
                        f"{type(max_tokens).__name__}") from None
    if max_tokens < 0:
        raise ValueError(f"[models.generate] max_tokens must be at least 0, got {max_tokens}")
    if not prompt:
        raise ValueError("[models.generate] the prompt must not be empty: each byte is predicted "
                         "from the ones before it; pass at least one character")
    c = model.config
    if c.vocab > 256:
        raise ValueError(
            f"[models.generate] generates bytes, so it needs a byte-level model (vocab <= 256), "
            f"but this one has vocab {c.vocab}; for other token ids run the model and pick the "
            "tokens yourself")
    seq = c.max_seq
    data = list(prompt.encode())
    if max(data) >= c.vocab:
        raise ValueError(f"[models.generate] the prompt has byte {max(data)}, which is not below "
                         f"the model's vocab of {c.vocab}; use characters whose UTF-8 bytes are")
    if len(data) + max_tokens > seq:
        raise ValueError(f"[models.generate] the prompt ({len(data)} bytes) and max_tokens "
                         f"{max_tokens} exceed the model's context of {seq} tokens; shorten one")
    start = len(data)
    with no_grad():
        for _ in range(max_tokens):
            buf = data + [0] * (seq - len(data))
            logits = model(tensor([buf]))[0, len(data) - 1]
            best = logits.amax()
            ids = arange(logits.shape[0], dtype=_C.dtype.float32)
            data.append(int(where(logits == best, ids, -1.0).amax().item()))
    return bytes(data[start:]).decode("latin-1")
