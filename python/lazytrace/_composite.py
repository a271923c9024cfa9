"""torch ops composed of lazytrace's own: split, chunk and unbind (slices), tril, triu and eye
(masks from aranges), linspace, logsumexp, norm, prod (a pairwise product tree), cumsum and
cumprod (log-step scans: log2(n) shifted adds), gather and scatter_add (index_select and
index_add over the flattened tensor), fmod, and the alpha= and rounding_mode= forms of add,
sub and div. Each is differentiable where torch's is, through the ops it is made of."""

import builtins
import math
import numbers

from . import _lazytrace as _C
from ._lazytrace import Tensor
from ._tensor import (_FLOATING, _INT_RANGE, _castable_in_place, _check_device, _check_dtype,
                      _dim, _dims, _finish, amin, floor_divide, remainder, trunc)

__all__ = ["split", "chunk", "unbind", "tril", "triu", "eye", "linspace", "logsumexp", "norm",
           "prod", "cumsum", "cumprod", "gather", "scatter_add", "fmod", "add", "sub", "div"]


def _int(v, op, what):
    if isinstance(v, builtins.bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"[{op}] {what} must be an int, got {type(v).__name__} {v!r}")
    return int(v)


def _sized_dim(input, dim, op):
    if input.ndim == 0:
        raise ValueError(f"[{op}] needs a tensor of at least one dim, got {input.type_str()}")
    return _dim(input, dim, op)


# ---- pieces
def split(tensor, split_size_or_sections, dim=0):
    """torch.split: pieces of split_size along dim (the last may be smaller), or of the
    sizes in a list (which must add up to the dim's size)."""
    d = _sized_dim(tensor, dim, "split")
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, numbers.Integral):
        size = _int(split_size_or_sections, "split", "split_size")
        if size < 0 or (size == 0 and n != 0):
            raise ValueError(f"[split] split_size must be positive (0 only for a dim of size 0), "
                             f"got {size} for dim {d} of {tensor.type_str()}")
        sizes = ([size] * (n // size) + ([n % size] if n % size else [])) if size else []
        sizes = sizes or [0]
    else:
        sizes = [_int(s, "split", "each section size") for s in split_size_or_sections]
        if builtins.any(s < 0 for s in sizes) or builtins.sum(sizes) != n:
            raise ValueError(f"[split] the sizes {sizes} must be >= 0 and add up to {n}, the size "
                             f"of dim {d} of {tensor.type_str()}")
    out, at = [], 0
    for s in sizes:
        out.append(_C.slice(tensor, d, at, at + s, 1))
        at += s
    return tuple(out)


def chunk(input, chunks, dim=0):
    """torch.chunk: at most `chunks` pieces of ceil(size / chunks) along dim."""
    chunks = _int(chunks, "chunk", "chunks")
    if chunks <= 0:
        raise ValueError(f"[chunk] chunks must be positive, got {chunks}")
    n = input.shape[_sized_dim(input, dim, "chunk")]
    return split(input, builtins.max(-(-n // chunks), 1), dim)


def unbind(input, dim=0):
    """torch.unbind: the slices along dim, each without that dim."""
    d = _sized_dim(input, dim, "unbind")
    return tuple(_C.select(input, d, i) for i in range(input.shape[d]))


# ---- masks and ranges
def _band(input, diagonal, op, lower):
    if input.ndim < 2:
        raise ValueError(f"[{op}] needs a tensor of at least 2 dims, got {input.type_str()}")
    diagonal = _int(diagonal, op, "diagonal")
    m, n = input.shape[-2], input.shape[-1]
    rows = _C.reshape(_C.arange(0.0, float(m), 1.0, _C.dtype.int64), (m, 1))
    cols = _C.reshape(_C.arange(0.0, float(n), 1.0, _C.dtype.int64), (1, n))
    keep = (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)
    zero = False if input.dtype == _C.dtype.bool else 0
    return _C.where(keep, input, zero)


def tril(input, diagonal=0):
    """torch.tril: the elements on and below the diagonal (above it: +diagonal), zeros elsewhere."""
    return _band(input, diagonal, "tril", True)


def triu(input, diagonal=0):
    """torch.triu: the elements on and above the diagonal (below it: -diagonal), zeros elsewhere."""
    return _band(input, diagonal, "triu", False)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """torch.eye: ones on the diagonal of an n x m matrix (m defaults to n)."""
    _check_device(device, "eye")
    n = _int(n, "eye", "n")
    m = n if m is None else _int(m, "eye", "m")
    if n < 0 or m < 0:
        raise ValueError(f"[eye] n and m must be >= 0, got {n} and {m}")
    d = _check_dtype(dtype, "eye") or _C.dtype.float32
    rows = _C.reshape(_C.arange(0.0, float(n), 1.0, _C.dtype.int64), (n, 1))
    cols = _C.reshape(_C.arange(0.0, float(m), 1.0, _C.dtype.int64), (1, m))
    return _finish(_C.astype(rows == cols, d), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """torch.linspace: `steps` values from start to end inclusive, evenly spaced (computed in
    float64 from whichever end is nearer, so the last is `end` exactly)."""
    _check_device(device, "linspace")
    steps = _int(steps, "linspace", "steps")
    if steps < 0:
        raise ValueError(f"[linspace] steps must be >= 0, got {steps}")
    for name, v in (("start", start), ("end", end)):
        if isinstance(v, builtins.bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"[linspace] {name} must be a number, got {type(v).__name__} {v!r}")
    d = _check_dtype(dtype, "linspace") or _C.dtype.float32
    i = _C.arange(0.0, float(steps), 1.0, _C.dtype.float64)
    if steps <= 1:
        out = i + float(start)
    else:
        step = (float(end) - float(start)) / (steps - 1)
        out = _C.where(i < steps // 2, i * step + float(start),
                       float(end) - (float(steps - 1) - i) * step)
    return _finish(_C.astype(out, d), requires_grad)


# ---- reductions
def _reduced_dims(input, dim, op):
    if dim is None:
        return tuple(range(input.ndim))
    return tuple(sorted({_dim(input, d, op) for d in _dims(dim, op)})) if input.ndim else ()


def logsumexp(input, dim, keepdim=False):
    """torch.logsumexp: log(sum(exp(x))) over dim, without overflow (the largest subtracted
    first; a row of -inf gives -inf)."""
    if input.dtype not in _FLOATING:
        input = _C.astype(input, _C.dtype.float32)
    dims = _reduced_dims(input, dim, "logsumexp")
    if not dims:
        return input
    if builtins.any(input.shape[d] == 0 for d in dims):  # log of an empty sum: -inf
        out = _C.log(_C.sum(_C.exp(input), dims, True))
    else:
        m = _C.amax(input.detach(), dims, True)
        m = _C.where(_C.abs(m) == float("inf"), 0.0, m)  # all -inf (or an inf): no shift
        out = _C.log(_C.sum(_C.exp(input - m), dims, True)) + m
    for d in reversed(dims) if not keepdim else ():
        out = _C.squeeze(out, d)
    return out


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm's vector norms: p = 2 or "fro" (the default), 1, inf, -inf, 0 (the count
    of nonzeros) or any other number, over dim (None: every element). The gradient at a zero
    vector is 0, as torch's."""
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype not in _FLOATING:
        raise ValueError(f"[norm] needs a floating input, got {input.type_str()}; convert first "
                         "with t.to(lt.float32)")
    if p == "fro":
        p = 2
    if isinstance(p, str) or isinstance(p, builtins.bool) or not isinstance(p, numbers.Real):
        raise ValueError(f"[norm] p must be a number or 'fro' (vector norms), got {p!r}")
    dims = _reduced_dims(input, dim, "norm")
    if input.dtype in (_C.dtype.float16, _C.dtype.bfloat16):  # (squares overflow float16)
        return _C.astype(norm(_C.astype(input, _C.dtype.float32), p, dim, keepdim), input.dtype)
    a = _C.abs(input)
    if p == math.inf:
        out = _C.amax(a, dims, keepdim) if dims else a
    elif p == -math.inf:
        out = amin(a, dims, keepdim) if dims else a
    elif p == 0:
        out = _C.sum(_C.astype(input != 0, input.dtype), dims, keepdim)
    else:
        s = _C.sum(a * a if p == 2 else (a if p == 1 else _C.pow(a, float(p))), dims, keepdim)
        if p == 1:
            return s
        zero = s == 0  # (a root's slope at 0 is inf: the gradient there is 0, not NaN)
        safe = _C.where(zero, 1.0, s)
        out = _C.where(zero, 0.0, _C.sqrt(safe) if p == 2 else _C.pow(safe, 1.0 / p))
    return out


def _halves(x, d):
    """The product of x's even and odd positions along d (padded with a one where odd)."""
    n = x.shape[d]
    if n % 2:
        shape = list(x.shape)
        shape[d] = 1
        x = _C.concat([x, _C.ones(tuple(shape), x.dtype)], d)
        n += 1
    return _C.slice(x, d, 0, n, 2) * _C.slice(x, d, 1, n, 2)


def prod(input, dim=None, keepdim=False, dtype=None):
    """torch.prod over one dim (or every element): a tree of pairwise products, log2(n)
    steps. Integer and bool inputs multiply in int64, as torch's."""
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype not in _FLOATING:
        input = _C.astype(input, _C.dtype.int64)
    if dim is None:
        x, d = _C.reshape(input, (-1,)), 0
    else:
        if not isinstance(dim, numbers.Integral):
            raise TypeError(f"[prod] dim must be an int (one dim, as torch), got {dim!r}")
        x, d = input, _dim(input, dim, "prod")
        if input.ndim == 0:
            return input
    if x.shape[d] == 0:
        shape = list(x.shape)
        shape[d] = 1
        x = _C.ones(tuple(shape), x.dtype)
    while x.shape[d] > 1:
        x = _halves(x, d)
    if dim is None:
        return _C.reshape(x, (1,) * input.ndim if keepdim else ())
    return x if keepdim else _C.squeeze(x, d)


def _scan(input, dim, dtype, op, combine, fill):
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype not in _FLOATING:  # integers and bools count in int64, as torch
        input = _C.astype(input, _C.dtype.int64)
    d = _dim(input, dim, op)
    if input.ndim == 0:
        return input
    n = input.shape[d]
    x, k = input, 1
    while k < n:  # Hillis-Steele: after the step with shift k, x[i] covers (i - 2k, i]
        shape = list(x.shape)
        shape[d] = k
        shifted = _C.concat([_C.full(tuple(shape), fill, x.dtype), _C.slice(x, d, 0, n - k, 1)], d)
        x = combine(x, shifted)
        k *= 2
    return x


def cumsum(input, dim, dtype=None):
    """torch.cumsum along dim: log2(n) shifted adds (the sums' order differs from a running
    sum's, within float rounding; integers exact)."""
    return _scan(input, dim, dtype, "cumsum", lambda a, b: a + b, 0)


def cumprod(input, dim, dtype=None):
    """torch.cumprod along dim: log2(n) shifted products."""
    return _scan(input, dim, dtype, "cumprod", lambda a, b: a * b, 1)


# ---- gathering and scattering by index
def _flat_positions(input, dim, index, op):
    """The flat positions in input of index's elements along dim (torch's gather/scatter
    addressing). An index out of [0, size) is an IndexError where its values are known; one
    still pending gives a position past the end, which index_select and index_add refuse when
    they run."""
    if not isinstance(index, Tensor) or index.dtype not in _INT_RANGE:
        raise TypeError(f"[{op}] index must be an int64 (or int32) tensor, got "
                        f"{index.type_str() if isinstance(index, Tensor) else type(index).__name__}")
    if index.ndim != input.ndim:
        raise ValueError(f"[{op}] index ({index.type_str()}) must have as many dims as the "
                         f"input ({input.type_str()})")
    d = _dim(input, dim, op)
    for e in range(input.ndim):
        if e != d and index.shape[e] > input.shape[e]:
            raise ValueError(f"[{op}] index {index.type_str()} is larger than the input "
                             f"{input.type_str()} in dim {e} (only dim {d} may differ)")
    strides, s = [0] * input.ndim, 1
    for e in reversed(range(input.ndim)):
        strides[e] = s
        s *= input.shape[e]
    if not index.is_pending() and index.numel():
        host = index.numpy()
        bad = host[(host < 0) | (host >= input.shape[d])]
        if bad.size:
            raise IndexError(f"[{op}] index {bad.flat[0]} is out of range for dim {d} of size "
                             f"{input.shape[d]} ({input.type_str()})")
    idx = _C.astype(index, _C.dtype.int64)
    pos = _C.where((idx < 0) | (idx >= input.shape[d]), -(s + 1), idx * strides[d])
    for e in range(input.ndim):
        if e == d or index.shape[e] == 1:
            continue
        shape = [1] * input.ndim
        shape[e] = index.shape[e]
        at = _C.reshape(_C.arange(0.0, float(index.shape[e]), 1.0, _C.dtype.int64), tuple(shape))
        pos = _C.where(pos < 0, pos, pos + at * strides[e])
    return _C.reshape(pos, (-1,))


def gather(input, dim, index):
    """torch.gather: out[i][j][k] = input[i][index[i][j][k]][k] (dim 1), of index's shape."""
    if input.ndim == 0 and isinstance(index, Tensor):
        return _C.reshape(gather(_C.reshape(input, (1,)), 0, _C.reshape(index, (-1,))), ())
    pos = _flat_positions(input, dim, index, "gather")
    return _C.reshape(_C.index_select(_C.reshape(input, (-1,)), 0, pos), tuple(index.shape))


def scatter_add(input, dim, index, src):
    """torch.scatter_add: input with src[i][j][k] added at [i][index[i][j][k]][k] (dim 1);
    repeated positions add up."""
    if input.ndim == 0:
        raise ValueError(f"[scatter_add] needs a tensor of at least one dim, got "
                         f"{input.type_str()}")
    pos = _flat_positions(input, dim, index, "scatter_add")
    if not isinstance(src, Tensor):
        raise TypeError(f"[scatter_add] src must be a Tensor, got {type(src).__name__}")
    if src.ndim != index.ndim or builtins.any(i > s for i, s in zip(index.shape, src.shape)):
        raise ValueError(f"[scatter_add] src {src.type_str()} must be at least as large as the "
                         f"index {index.type_str()} in every dim")
    for e in range(src.ndim):  # the part of src the index covers
        if src.shape[e] != index.shape[e]:
            src = _C.slice(src, e, 0, index.shape[e], 1)
    flat = _C.index_add(_C.reshape(input, (-1,)), 0, pos, _C.reshape(src, (-1,)))
    return _C.reshape(flat, tuple(input.shape))


# ---- arithmetic forms
def fmod(input, other):
    """torch.fmod: the remainder of truncated division (the dividend's sign), where
    remainder (Python's %) takes the divisor's."""
    r = remainder(input, other)
    r = _C.where((r != 0) & ((input < 0) != (other < 0)), r - other, r)
    if isinstance(other, Tensor):
        by_inf = _C.abs(other) == math.inf if other.dtype in _FLOATING else None
    else:
        by_inf = True if isinstance(other, float) and math.isinf(other) else None
    if by_inf is None:
        return r
    # finite x fmod ±inf is x, where Python's % gives the divisor's inf
    return _C.where((_C.abs(input) != math.inf) & by_inf, input, r)


def _alpha(op, input, other, alpha):
    """other * alpha, refusing a float alpha between integers (as torch)."""
    if alpha == 1:
        return other
    ints = builtins.all(isinstance(v, numbers.Integral) or (
        isinstance(v, Tensor) and v.dtype not in _FLOATING) for v in (input, other))
    if ints and not isinstance(alpha, numbers.Integral):
        raise TypeError(f"[{op}] for integer inputs alpha must be an int, got {alpha!r}")
    return other * alpha


def add(input, other, *, alpha=1):
    """torch.add: input + alpha * other."""
    return _C.add(input, _alpha("add", input, other, alpha))


def sub(input, other, *, alpha=1):
    """torch.sub: input - alpha * other."""
    return _C.sub(input, _alpha("sub", input, other, alpha))


def div(input, other, *, rounding_mode=None):
    """torch.div: true division, or rounded: rounding_mode "floor" (Python's //) or "trunc"
    (toward zero)."""
    if rounding_mode is None:
        return _C.div(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode != "trunc":
        raise ValueError(f"[div] rounding_mode must be None, 'floor' or 'trunc', got "
                         f"{rounding_mode!r}")
    if builtins.any(isinstance(v, float) or (isinstance(v, Tensor) and v.dtype in _FLOATING)
                    for v in (input, other)):
        return trunc(_C.div(input, other))
    q = floor_divide(input, other)  # integers: up by one where the signs differ, inexactly
    r = remainder(input, other)
    return _C.where((r != 0) & ((input < 0) != (other < 0)), q + 1, q)


_plain_add_, _plain_sub_, _plain_div_ = Tensor.add_, Tensor.sub_, Tensor.div_


def _add_(self, other, *, alpha=1):
    """Tensor.add_: self += alpha * other."""
    return _plain_add_(self, _alpha("add_", self, other, alpha))


def _sub_(self, other, *, alpha=1):
    """Tensor.sub_: self -= alpha * other."""
    return _plain_sub_(self, _alpha("sub_", self, other, alpha))


def _div_(self, other, *, rounding_mode=None):
    """Tensor.div_: self /= other, or rounded (rounding_mode "floor" or "trunc")."""
    if rounding_mode is None:
        return _plain_div_(self, other)
    return self.copy_(_castable_in_place("div_", self, div(self, other,
                                                            rounding_mode=rounding_mode)))


def _install():
    Tensor.add_, Tensor.sub_, Tensor.div_ = _add_, _sub_, _div_
    for name in ("split", "chunk", "unbind", "tril", "triu", "logsumexp", "norm", "prod", "cumsum",
                 "cumprod", "gather", "scatter_add", "fmod", "add", "sub", "div"):
        setattr(Tensor, name, globals()[name])


_install()
