"""torch.nn.functional over lazytrace ops."""

import builtins
import math
import numbers
import operator

from .. import _lazytrace as _C
from .._tensor import Tensor, _opmath, arange, log_softmax, rand, softmax, where


linear = _C.linear  # input @ weight.T + bias; weight [out_features, in_features] as torch's


def _floating(op, input):
    if not isinstance(input, Tensor):
        raise TypeError(f"[{op}] expects a Tensor, got {type(input).__name__}")
    if not input.dtype.is_floating_point:
        raise ValueError(f"[{op}] needs a floating input, got {input.type_str()}; convert first "
                         "with t.to(lt.float32).")


def _check_normalized(op, input, normalized_shape, **params):
    _floating(op, input)
    if type(normalized_shape) is int:  # the common case, fast
        shape = (normalized_shape,)
        w = params.get("weight")
        if (builtins.all(t is None or isinstance(t, Tensor) for t in params.values())
                and input.ndim >= 1 and input.shape[-1] == normalized_shape
                and (w is None or tuple(w.shape) == shape)
                and (params.get("bias") is None or tuple(params["bias"].shape) == shape)):
            return 1
    try:
        shape = ((operator.index(normalized_shape),) if not isinstance(normalized_shape, bool)
                 else None)
    except TypeError:
        try:
            shape = tuple(normalized_shape)
        except TypeError:
            shape = None
    if shape is None or any(isinstance(d, bool) or not isinstance(d, numbers.Integral)
                            for d in shape):
        raise TypeError(f"[{op}] normalized_shape must be an int or a sequence of ints (the "
                        f"input's last dims), got {type(normalized_shape).__name__} "
                        f"{normalized_shape!r}")
    shape = tuple(int(d) for d in shape)
    for name, t in params.items():
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"[{op}] {name} must be a Tensor of shape {list(shape)} or None, got "
                            f"{type(t).__name__}; make one with lazytrace.tensor(...)")
    n = len(shape)
    if input.ndim < n or tuple(input.shape[input.ndim - n:]) != shape:
        raise ValueError(
            f"[{op}] normalized_shape {list(shape)} must be the input's last dims, got input "
            f"{input.type_str()}: give an input of shape [*, {', '.join(map(str, shape))}]")
    for name, t in params.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"[{op}] {name} {t.type_str()} must have normalized_shape "
                             f"{list(shape)}")
    return n


def _result(input, out, inplace):
    # inplace=True, as torch: the input takes the result (every holder sees it) and is returned
    if not inplace:
        return out
    input.copy_(out)
    return input


def relu(input, inplace=False):
    return _result(input, _C.relu(input), inplace)


def gelu(input, approximate="none"):
    if approximate == "none":
        return _C.gelu(input)
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * input * (1.0 + _C.tanh(c * (input + 0.044715 * input * input * input)))
    raise ValueError(f"[gelu] approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input, inplace=False):
    return _result(input, _C.silu(input), inplace)


def sigmoid(input):
    return _C.sigmoid(input)


def tanh(input):
    return _C.tanh(input)


def _check_p(op, p):
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"[{op}] p must be a number in [0, 1], got {type(p).__name__} {p!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"[{op}] p must be in [0, 1], got {p}")


def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability p and scales the rest by 1/(1-p) (training only)."""
    _check_p("dropout", p)
    if not training or p == 0.0:
        return input
    _floating("dropout", input)
    if p == 1.0:
        return _result(input, input * 0.0, inplace)
    # a rank's examples of a global batch (distributed.shard) draw the global batch's masks,
    # the input read as one row per example (batch first, or its example-major flattening)
    first, count, total = _C.batch_rows()
    n = input.numel()
    if count and n and n % count == 0:
        u = _C.reshape(_C.rand_rows((count, n // count), first, total, input.dtype), tuple(input.shape))
    else:
        u = rand(*input.shape, dtype=input.dtype)
    keep = u >= p
    return _result(input, where(keep, input * (1.0 / (1.0 - p)), 0.0), inplace)


def _padding_index(padding_idx, num, op):
    try:
        i = operator.index(padding_idx)
    except TypeError:
        i = None
    if i is None or isinstance(padding_idx, bool) or not -num <= i < num:
        raise ValueError(f"[{op}] padding_idx {padding_idx!r} must be an int in [{-num}, {num}) "
                         f"for {num} embeddings")
    return i + num if i < 0 else i


def embedding(input, weight, padding_idx=None):
    """Rows of weight [num, dim] picked by the integer tensor input: input.shape + (dim,). An
    index outside [0, num) raises, as torch's (negative indices do not wrap); the rows picked
    at padding_idx pass no gradient to the weight."""
    if isinstance(weight, Tensor) and weight.ndim == 2 and weight.shape[0] == 0 and (
            isinstance(input, Tensor) and input.numel()):
        raise ValueError(f"[Embedding] the weight {weight.type_str()} has 0 embeddings, so every "
                         "index is out of range (indices must be in [0, num_embeddings)); make "
                         "it with num_embeddings > 0")
    rows = _C.embedding(input, weight)
    if padding_idx is None:
        return rows
    pad = _padding_index(padding_idx, weight.shape[0], "embedding")
    return _C.where(_C.unsqueeze(input != pad, -1), rows, rows.detach())


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """16-bit inputs are normalized in float32."""
    n = _check_normalized("layer_norm", input, normalized_shape, weight=weight, bias=bias)
    return _C.layer_norm(input, n, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """16-bit inputs are normalized in float32; eps=None is the dtype's epsilon (torch)."""
    n = _check_normalized("rms_norm", input, normalized_shape, weight=weight)
    if eps is None:
        eps = {_C.dtype.float64: 2.220446049250313e-16, _C.dtype.float16: 0.0009765625,
               _C.dtype.bfloat16: 0.0078125}.get(input.dtype, 1.1920928955078125e-07)
    return _C.rms_norm(input, n, weight, eps)


def _loss_input(t):
    # the losses take float32 under autocast, as torch's (a bfloat16 or float16 tensor cast up)
    return _C._autocast_float32(t) if isinstance(t, Tensor) else t


def _class_last(input):
    # torch puts classes at dim 1 of [N, C, d1, ...]; the C++ loss takes them last
    if input.ndim > 2:
        return _C.permute(input, (0,) + tuple(range(2, input.ndim)) + (1,))
    return input


def _check_target(op, input, target, weight, reduction):
    """torch's rules for a loss over classes: integer targets of the input's shape without
    its class dim (dim 1; a [C] input takes a 0-d target), a weight per class."""
    if not isinstance(target, Tensor) or target.dtype not in (_C.dtype.int32, _C.dtype.int64):
        raise TypeError(
            f"[{op}] targets must be an int32/int64 Tensor of class indices, got "
            + (target.type_str() if isinstance(target, Tensor) else type(target).__name__)
        )
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"[{op}] reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if isinstance(input, Tensor) and input.ndim >= 1:
        want = tuple(input.shape[:1]) + tuple(input.shape[2:]) if input.ndim >= 2 else ()
        if tuple(target.shape) != want:
            raise ValueError(f"[{op}] target {target.type_str()} must have the shape of input "
                             f"{input.type_str()} without its class dim (dim 1): {list(want)}")
    if weight is not None:
        classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
        if not isinstance(weight, Tensor) or tuple(weight.shape) != (classes,):
            raise ValueError(f"[{op}] weight must be a tensor of one weight per class "
                             f"([{classes}]), got " + (weight.type_str() if isinstance(
                                 weight, Tensor) else type(weight).__name__))


def _weighted(per, target, weight, ignore_index, reduction):
    """torch's class-weighted loss from the per-target losses: each times its class's
    weight; the mean divides by the weights of the targets not ignored."""
    keep = target != ignore_index
    picked = _C.index_select(weight, 0, _C.reshape(_C.where(keep, target, 0), (-1,)))
    w = _C.where(keep, _C.reshape(picked, tuple(target.shape)), 0)
    w = _C.astype(w, per.dtype)
    return _reduced(per * w, w, reduction)


def _reduced(loss, count, reduction):
    """Per-target losses reduced as torch's: kept, summed, or summed over the sum of count
    (in float32 for 16-bit losses)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return _C.sum(loss)
    acc = _opmath(loss.dtype)
    return _C.astype(_C.sum(_C.astype(loss, acc)) / _C.sum(_C.astype(count, acc)), loss.dtype)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """Softmax cross entropy of logits [N, C] (or [N, C, d1, ...]) against integer class
    targets; mean over the targets that are not ignore_index (weighted by class with
    weight=, as torch's)."""
    _check_target("cross_entropy", input, target, weight, reduction)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"[cross_entropy] label_smoothing must be a number in [0, 1], got "
                        f"{type(label_smoothing).__name__} {label_smoothing!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"[cross_entropy] label_smoothing must be in [0, 1] (as torch), got "
                         f"{label_smoothing}")
    logits = _loss_input(_class_last(input))
    if weight is not None:
        if label_smoothing:
            raise ValueError("[cross_entropy] weight= with label_smoothing is not supported; "
                             "give one of them")
        per = _C.cross_entropy(logits, target, ignore_index, "none")
        return _weighted(per, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return _C.cross_entropy(logits, target, ignore_index, reduction)
    nll = _C.cross_entropy(logits, target, ignore_index, "none")
    smooth = -_C.mean(_C.log_softmax(logits, -1), (-1,), False)
    keep = target != ignore_index
    loss = (1.0 - label_smoothing) * nll + label_smoothing * _C.where(keep, smooth, 0.0)
    return _reduced(loss, keep, reduction)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of integer targets under log-probabilities input [N, C] (or
    [N, C, d1, ...]); mean over the targets that are not ignore_index (weighted by class with
    weight=, as torch's)."""
    _check_target("nll_loss", input, target, weight, reduction)
    if weight is not None:
        per = _C.nll_loss(_class_last(input), target, ignore_index, "none")
        return _weighted(per, target, weight, ignore_index, reduction)
    return _C.nll_loss(_class_last(input), target, ignore_index, reduction)


def _check_broadcast(op, input, target):
    a, b = tuple(input.shape), tuple(target.shape)
    if any(x != y and 1 not in (x, y) for x, y in zip(reversed(a), reversed(b))):
        raise ValueError(f"[{op}] input {input.type_str()} and target {target.type_str()} "
                         "must have the same shape (or shapes that broadcast)")


def mse_loss(input, target, reduction="mean"):
    _check_broadcast("mse_loss", input, target)
    if reduction == "mean":
        return _C.mse_loss(input, target)
    input, target = _loss_input(input), _loss_input(target)
    d = (input - target) * (input - target)
    if reduction == "sum":
        return _C.sum(d)
    if reduction == "none":
        return d
    raise ValueError(f"[mse_loss] reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def l1_loss(input, target, reduction="mean"):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"[l1_loss] reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    _check_broadcast("l1_loss", input, target)
    d = _C.abs(_loss_input(input) - _loss_input(target))
    return {"mean": lambda: _C.mean(d), "sum": lambda: _C.sum(d), "none": lambda: d}[reduction]()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q kᵀ · scale + mask) v over [..., L, E] queries and [..., S, E] keys/values."""
    _check_attention(query, key, value, attn_mask, scale, enable_gqa)
    if is_causal and attn_mask is not None:
        raise ValueError("[scaled_dot_product_attention] give attn_mask or is_causal=True, not "
                         "both (as torch); fold the causal mask into attn_mask to combine them")
    L, S, E = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = _repeat_heads(key, rep)
        value = _repeat_heads(value, rep)
    scores = _C.matmul(query, _C.transpose(key, -2, -1)) * scale
    if is_causal:
        rows = _C.reshape(arange(L), (L, 1))
        cols = _C.reshape(arange(S), (1, S))
        scores = where(cols <= rows, scores, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == _C.dtype.bool:
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = _C.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return _C.matmul(weights, value)


def _check_attention(query, key, value, attn_mask, scale, enable_gqa):
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"[{op}] {name} must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(f"[{op}] {name} must have at least 2 dims ([..., L, E] queries, "
                             f"[..., S, E] keys and values), got {t.type_str()}; unsqueeze(0) "
                             "a single vector")
    shapes = f"query {query.type_str()}, key {key.type_str()}, value {value.type_str()}"
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(f"[{op}] query and key must have the same embedding size E (last dim), "
                         f"got {shapes}")
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(f"[{op}] key and value must have the same sequence length S (dim -2), "
                         f"got {shapes}")
    if scale is None and query.shape[-1] == 0:
        raise ValueError(f"[{op}] the embedding size E (last dim) is 0, so the default scale "
                         f"1/sqrt(E) is undefined, got {shapes}: give scale= or E > 0")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"[{op}] scale must be a number or None, got {type(scale).__name__}")
    if (not enable_gqa and query.ndim >= 3 and key.ndim >= 3
            and key.shape[-3] not in (query.shape[-3], 1)):  # (one k/v head broadcasts)
        raise ValueError(f"[{op}] query and key have different numbers of heads (dim -3), got "
                         f"{shapes}; pass enable_gqa=True for grouped-query attention")
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if value.shape[-3] != hk:
            raise ValueError(f"[{op}] enable_gqa: key and value must have the same number of "
                             f"heads (dim -3), got {shapes}")
        if hk == 0 or hq % hk:
            raise ValueError(f"[{op}] enable_gqa: the query heads ({hq}, dim -3) must be a "
                             f"multiple of the key/value heads ({hk}), got {shapes}")
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise TypeError(f"[{op}] attn_mask must be a Tensor (bool: where to attend; float: added "
                        f"to the scores) or None, got {type(attn_mask).__name__}; make one with "
                        "lazytrace.tensor(...)")
    if attn_mask is not None:
        scores = tuple(query.shape[:-1]) + (key.shape[-2],)  # [..., L, S]
        m = tuple(attn_mask.shape)
        if len(m) > len(scores) or any(
                x != y and x != 1 for x, y in zip(reversed(m), reversed(scores))):
            raise ValueError(f"[{op}] attn_mask {attn_mask.type_str()} must broadcast to the "
                             f"scores [..., L, S] = {list(scores)}, got {shapes}")


def _repeat_heads(t, rep):
    # [..., H, S, E] -> [..., H * rep, S, E], each head repeated rep times in place
    shape = tuple(t.shape)
    t = _C.unsqueeze(t, -3)
    t = _C.broadcast_to(t, shape[:-2] + (rep,) + shape[-2:])
    return _C.reshape(t, shape[:-3] + (shape[-3] * rep,) + shape[-2:])


__all__ = [n for n, v in dict(globals()).items()
           if callable(v) and not n.startswith("_") and n != "Tensor"]
