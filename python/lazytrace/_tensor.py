"""Tensors for Python: creation with torch's argument forms, the op functions, and the
methods whose argument forms are plain Python (reshape(*shape), indexing, max(dim)). The
operators, autograd and host memory are in the extension (python/src/tensor.cpp)."""

import builtins
import collections
import copy
import math
import numbers
import operator
import types

import numpy as np

from . import _lazytrace as _C
from . import _modes

Tensor = _C.Tensor
dtype = _C.dtype

_FLOATING = (dtype.float32, dtype.float64, dtype.float16, dtype.bfloat16)
_NP_TO_LT = {
    np.dtype(np.float32): dtype.float32,
    np.dtype(np.float64): dtype.float64,
    np.dtype(np.float16): dtype.float16,
    np.dtype(np.int32): dtype.int32,
    np.dtype(np.int64): dtype.int64,
    np.dtype(np.bool_): dtype.bool,
    # integers lazytrace has no type of its own for: the smallest one that holds them
    np.dtype(np.int8): dtype.int32,
    np.dtype(np.int16): dtype.int32,
    np.dtype(np.uint8): dtype.int32,
    np.dtype(np.uint16): dtype.int32,
    np.dtype(np.uint32): dtype.int64,
}
_LT_TO_NP = {
    dtype.float32: np.float32,
    dtype.float64: np.float64,
    dtype.float16: np.float16,
    dtype.int32: np.int32,
    dtype.int64: np.int64,
    dtype.bool: np.bool_,
}


def _dtype_repr(self):
    return "lazytrace." + self.name


dtype.__repr__ = _dtype_repr
dtype.__str__ = _dtype_repr
dtype.is_floating_point = property(lambda self: self in _FLOATING)
dtype.itemsize = property(lambda self: _C.itemsize(self))


def _check_dtype(d, op):
    if d is None or isinstance(d, dtype):
        return d
    if isinstance(d, np.dtype) or (isinstance(d, type) and issubclass(d, np.generic)):
        nd = np.dtype(d)
        if nd.type in _LT_TO_NP.values():
            return _NP_TO_LT[nd]
    if d is builtins.float:  # a Python float is a double, as torch and NumPy read it
        return dtype.float64
    if d is builtins.int:
        return dtype.int64
    if d is builtins.bool:
        return dtype.bool
    raise TypeError(f"[{op}] dtype must be a lazytrace dtype (lazytrace.float32, ...), got {d!r}")


def _check_device(device, op):
    if device is None:
        return
    name = str(getattr(device, "type", device))
    if name in ("cpu", "cpu:0"):
        return
    raise ValueError(
        f"[{op}] device {device!r} is not available: this build of lazytrace has the device "
        "'cpu' only (write device='cpu', or leave device out)"
    )


def _size(size, op):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for d in size:
        if type(d) is int:  # the common case, without the ABC check below
            continue
        if not isinstance(d, numbers.Integral) or isinstance(d, builtins.bool):
            raise TypeError(f"[{op}] a size holds ints, got {type(d).__name__} {d!r}")
    return size if builtins.all(type(d) is int for d in size) else tuple(int(d) for d in size)


def _new_shape(size, d, op):
    """_size for a new tensor: sizes >= 0, and a byte count that 64 bits can count."""
    size = _size(size, op)
    n = 1
    for s in size:
        if s < 0:
            raise ValueError(f"[{op}] negative dimension {s} in shape {list(size)}; sizes must be "
                             ">= 0.")
        n *= s
    if n * _C.itemsize(d) > 2**63 - 1:
        raise ValueError(f"[{op}] a {d.name} tensor of shape {list(size)} has more bytes than 64 "
                         "bits can count (more than any memory holds); make it smaller.")
    return size


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def _creator(name, make):
    def create(*size, dtype=None, device=None, requires_grad=False, **kw):
        _check_device(device, name)
        if "size" in kw:  # torch's keyword form: zeros(size=(2, 3))
            size = (kw.pop("size"),)
        if kw:
            raise TypeError(f"{name}() got an unexpected keyword argument '{next(iter(kw))}'")
        d = _check_dtype(dtype, name) or _C.dtype.float32
        return _finish(make(_new_shape(size, d, name), d), requires_grad)

    create.__name__ = name
    create.__doc__ = f"{name}(*size, dtype=lazytrace.float32, device='cpu', requires_grad=False)"
    return create


zeros = _creator("zeros", _C.zeros)
ones = _creator("ones", _C.ones)
randn = _creator("randn", _C.randn)
rand = _creator("rand", _C.rand)


def rand_rows(size, first, total, dtype=None):
    """Rows [first, first + size[0]) of rand(total, *size[1:]): what that draw gives those
    rows, the generator moving past all of it (a rank's slice of a global batch)."""
    return _C.rand_rows(_size((size,), "rand_rows"), first, total,
                        _check_dtype(dtype, "rand_rows") or _C.dtype.float32)


def manual_seed(seed):
    """Seeds the random number generator, as torch.manual_seed: any int in [-2**63, 2**64)
    (a negative one taken modulo 2**64)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"[manual_seed] seed must be an int, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not -2**63 <= seed < 2**64:
        raise ValueError(f"[manual_seed] seed {seed} is out of range: give an int in "
                         "[-2**63, 2**64)")
    _C.manual_seed(seed % 2**64)


def batch_rows():
    """(first, count, total): the rows of a global batch this thread's examples are
    (distributed.shard sets them; count 0: none); dropout keys its masks by them."""
    return _C.batch_rows()


def set_batch_rows(first=0, count=0, total=0):
    """Sets batch_rows() for this thread; no arguments: none."""
    _C.set_batch_rows(first, count, total)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of the given size (zeros: a lazy tensor has no uninitialized memory)."""
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def _filled(shape, fill_value, d, op):
    """A tensor of `shape` holding fill_value as dtype d: a number, or a one-element tensor
    (torch's 0-d value tensor, read when the result runs)."""
    if isinstance(fill_value, Tensor):
        if fill_value.numel() != 1:
            raise ValueError(f"[{op}] fill_value must be a number or a one-element tensor, got "
                             f"{fill_value.type_str()}")
        v = _C.reshape(fill_value, ())  # (differentiable, as torch's fill_)
        return _C.broadcast_to(v if v.dtype == d else _C.astype(v, d), tuple(shape))
    try:
        return _C.full(shape, fill_value, d)
    except ValueError as e:  # (the C++ check names full)
        msg = str(e)
        if op == "full" or not msg.startswith("[full]"):
            raise
        raise ValueError(f"[{op}]" + msg[len("[full]"):]) from None


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device, "full")
    d = _check_dtype(dtype, "full")
    if d is None:
        d = (
            fill_value.dtype
            if isinstance(fill_value, Tensor)
            else _C.dtype.bool
            if isinstance(fill_value, builtins.bool)
            else _C.dtype.int64
            if isinstance(fill_value, numbers.Integral)
            else _C.dtype.float32
        )
    return _finish(_filled(_new_shape((size,), d, "full"), fill_value, d, "full"), requires_grad)


def _like(t, op):
    """t, the tensor a *_like function copies the shape (and dtype) of; else torch's TypeError,
    with what to call instead."""
    if not isinstance(t, Tensor):
        make = op[: -len("_like")]
        hint = (f"use lazytrace.{make}(a.shape{', value' if make == 'full' else ''}, ...) for an "
                "array's shape, or lazytrace.tensor(a) to make one first"
                if hasattr(t, "shape") else "make one first with lazytrace.tensor(data)")
        raise TypeError(f"[{op}] expects a Tensor, got {type(t).__name__}: {hint}")
    return t


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    _check_device(device, "zeros_like")
    t = _like(t, "zeros_like")
    return _finish(_C.zeros(t.shape, _check_dtype(dtype, "zeros_like") or t.dtype), requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    _check_device(device, "ones_like")
    t = _like(t, "ones_like")
    return _finish(_C.ones(t.shape, _check_dtype(dtype, "ones_like") or t.dtype), requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device, "full_like")
    t = _like(t, "full_like")
    d = _check_dtype(dtype, "full_like") or t.dtype
    return _finish(_filled(t.shape, fill_value, d, "full_like"), requires_grad)


def randn_like(t, dtype=None, device=None):
    _check_device(device, "randn_like")
    t = _like(t, "randn_like")
    return _C.randn(t.shape, _check_dtype(dtype, "randn_like") or t.dtype)


def rand_like(t, dtype=None, device=None):
    _check_device(device, "rand_like")
    t = _like(t, "rand_like")
    return _C.rand(t.shape, _check_dtype(dtype, "rand_like") or t.dtype)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """torch.arange: [start, end) by step; int64 for integer arguments, else float32."""
    _check_device(device, "arange")
    if end is None:
        start, end = 0, start
    if (type(start) is int and type(end) is int and type(step) is int and dtype is None
            and -2**53 <= start <= 2**53 and -2**53 <= end <= 2**53):  # the common case, fast
        return _finish(_C.arange(float(start), float(end), float(step), _C.dtype.int64),
                       requires_grad)
    for name, v in (("start", start), ("end", end), ("step", step)):
        if type(v) not in (int, float) and (
                isinstance(v, (str, bytes)) or not isinstance(v, (numbers.Real, Tensor))):
            raise TypeError(f"[arange] {name} must be a number, got {type(v).__name__} "
                            f"{_short_repr(v)}")
    d = _check_dtype(dtype, "arange")
    if d is None:
        ints = (type(start) is int and type(end) is int and type(step) is int) or builtins.all(
            isinstance(v, numbers.Integral) or (isinstance(v, Tensor) and v.dtype in _INT_RANGE)
            for v in (start, end, step))
        d = _C.dtype.int64 if ints else _C.dtype.float32
    if d in _INT_RANGE:
        _check_arange_range(start, end, step, d)
    if (d in (_C.dtype.int64, _C.dtype.int32) and step != 0
            and builtins.all(isinstance(v, numbers.Integral) for v in (start, end, step))
            and builtins.max(builtins.abs(start), builtins.abs(end)) > 2**53):
        # past 2**53 a double cannot hold every integer: count in doubles (exact), then
        # scale and shift in the integer dtype
        n = builtins.max(0, -(-(int(end) - int(start)) // int(step)))
        return _finish(_C.arange(0.0, float(n), 1.0, d) * int(step) + int(start), requires_grad)
    return _finish(_C.arange(float(start), float(end), float(step), d), requires_grad)


class _BadData(Exception):
    """An element of tensor data that no tensor holds: the exception to raise and its message,
    where "{p}" stands for the element's path, gathered (innermost first) on the way out."""

    def __init__(self, exc, msg, what=True):
        super().__init__(msg)
        self.exc, self.msg, self.path, self.what = exc, msg, [], what


def _short_repr(x):
    r = repr(x)
    if isinstance(x, int) and len(r) > 30:
        return f"{r[:12]}...{r[-6:]} ({len(r)} digits)"
    return r if len(r) <= 60 else r[:57] + "..."


def _data_path(root, path):
    """root[i][j]...: where an element is (the indices outermost first), shortened past 10."""
    parts = [f"[{i}]" for i in path]
    if len(parts) > 10:
        parts = parts[:6] + ["..."] + parts[-3:]
    return root + "".join(parts)


_NUMBER_KIND = {"b": "b", "i": "i", "u": "i", "f": "f"}
_MAX_NDIM = 64  # NumPy's limit (NPY_MAXDIMS): the data passes through an array


def _data_kinds(data, op="tensor", root="data"):
    """The kinds of data's elements ("f", "i", "b"; "T" too where data is a list or tuple holding
    a tensor itself), after checking that data is what a tensor
    can hold: numbers, bools, numpy arrays and scalars of those, tensors, and (nested) lists
    and tuples of them of one shape. Else a TypeError naming op and the element's path and
    type (None, a str, ...), or a ValueError for ragged lists, as torch's tensor()."""
    kinds = set()

    def walk(x, depth):
        t = type(x)
        if t is float:
            kinds.add("f")
            return ()
        if t is int:
            kinds.add("i")
            return ()
        if t is builtins.bool:
            kinds.add("b")
            return ()
        if isinstance(x, Tensor):
            kinds.add("f" if x.dtype in _FLOATING else "b" if x.dtype == _C.dtype.bool else "i")
            if depth == 1:
                kinds.add("T")  # made by stacking (_make_tensor)
            return tuple(x.shape)
        if isinstance(x, (list, tuple, range)):
            if depth >= _MAX_NDIM:
                raise _BadData(ValueError, f"{{p}} nests lists more than {_MAX_NDIM} deep (or "
                                           "holds itself): a tensor made from lists has at most "
                                           f"{_MAX_NDIM} dims", False)
            first = None
            for i, v in enumerate(x):
                try:
                    s = walk(v, depth + 1)
                except _BadData as e:
                    e.path.append(i)
                    raise
                if first is None:
                    first = s
                elif s != first:
                    raise _BadData(ValueError, (
                        f"{{p}}[{i}] has shape {list(s)} but {{p}}[0] has shape {list(first)}: "
                        "nested lists must be rectangular (every row of a dim the same length)"),
                        False)
            return (len(x),) + (first if first is not None else ())
        if isinstance(x, (np.ndarray, np.generic)):
            kind = _NUMBER_KIND.get(x.dtype.kind)
            if kind is None:
                raise _BadData(TypeError, (
                    f"{{p}} is a numpy {'array' if x.ndim else 'scalar'} of dtype {x.dtype}, "
                    "which no tensor holds: give numbers (bool, int or float)"), False)
            kinds.add(kind)
            return tuple(x.shape)
        if isinstance(x, builtins.bool) or isinstance(x, np.bool_):
            kinds.add("b")
            return ()
        if isinstance(x, numbers.Integral):
            kinds.add("i")
            return ()
        if isinstance(x, numbers.Real):
            kinds.add("f")
            return ()
        if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
            return walk(np.asarray(x), depth)  # array-likes (torch tensors, ...)
        raise _BadData(TypeError, f"{{p}} is {type(x).__name__} {_short_repr(x)}")

    try:
        walk(data, 0)
    except _BadData as e:
        msg = e.msg.replace("{p}", _data_path(root, e.path[::-1]))
        if e.what:
            msg += (": a tensor's data must be numbers (bool, int, float), (nested) lists of "
                    "them, numpy arrays or tensors")
        raise e.exc(f"[{op}] {msg}") from None
    return kinds


def _check_arange_range(start, end, step, d):
    """arange's ValueError where an integer dtype cannot hold its first or last value (NumPy
    would wrap them; full and + refuse such values)."""
    try:
        vals = [v if isinstance(v, numbers.Integral) else builtins.float(v)
                for v in (start, end, step)]
    except (TypeError, ValueError, RuntimeError):
        return  # a traced or multi-element tensor: the C++ op says what is wrong
    a, b, s = vals
    if s == 0 or builtins.any(isinstance(v, builtins.float) and not math.isfinite(v)
                              for v in vals):
        return  # the C++ op refuses these in its words
    if builtins.all(isinstance(v, numbers.Integral) for v in vals):
        n = builtins.max(0, -(-(int(b) - int(a)) // int(s)))
        last = int(a) + (n - 1) * int(s)
    else:
        n = builtins.max(0, math.ceil((b - a) / s))
        last = a + (n - 1) * s
    if n == 0:
        return
    lo, hi = _INT_RANGE[d]
    for v in (a, last):
        if not lo - 1 < v < hi + 1:
            raise ValueError(
                f"[arange] its values run from {a} to {last}, which {d.name} cannot hold (its "
                f"range is [{lo}, {hi}]); give dtype=lazytrace."
                f"{'int64' if d == _C.dtype.int32 else 'float64'} or a smaller range")


def _infer_dtype(data, op="tensor", root="data"):
    """torch.tensor's rule: Python floats are float32, ints int64, bools bool (a numpy array
    keeps its dtype); checks the data. Returns (the dtype, _data_kinds' kinds: () for a
    tensor or an array)."""
    if isinstance(data, Tensor):
        return data.dtype, ()
    if isinstance(data, (np.ndarray, np.generic)):
        nd = data.dtype
        if nd not in _NP_TO_LT and nd.kind in "biuf" and not nd.isnative:
            nd = nd.newbyteorder("=")  # a big-endian array: copied in the machine's order
        if nd not in _NP_TO_LT:
            raise TypeError(
                f"[{op}] numpy dtype {data.dtype} has no lazytrace dtype; lazytrace has float32, "
                "float64, float16, int32, int64 and bool: convert first (a.astype(np.float32))"
            )
        return _NP_TO_LT[nd], ()
    kinds = _data_kinds(data, op, root)
    if "f" in kinds:
        return _C.dtype.float32, kinds
    if "i" in kinds:
        return _C.dtype.int64, kinds
    if "b" in kinds:
        return _C.dtype.bool, kinds
    return _C.dtype.float32, kinds  # an empty list


# the values an integer dtype holds, and (as floats, truncated toward zero) the open interval
# of floats that convert into it
_INT_RANGE = {_C.dtype.int32: (-2**31, 2**31 - 1), _C.dtype.int64: (-2**63, 2**63 - 1)}


def _element(data, idx):
    for i in idx:
        data = data[i]
    return data


def _data_error(data, d, op, root, err=None):
    """The ValueError for data holding a value that dtype d cannot hold (NaN or inf, or a
    number out of range, in an integer dtype; a Python int beyond int64), or None where none
    is found."""
    lo, hi = _INT_RANGE.get(d, (None, None))
    fix = f"give dtype=lazytrace.{'int64' if d == _C.dtype.int32 else 'float64'} or smaller values"

    def fits(v):
        return lo <= v <= hi if lo is not None else builtins.abs(v) < 2**1024  # float64's

    def ints(x):  # the first Python int (or numpy integer) that d cannot hold: (path, value)
        if type(x) in (float, builtins.bool):
            return None
        if isinstance(x, (list, tuple, range)):
            for i, v in enumerate(x):
                r = ints(v)
                if r:
                    r[0].append(i)
                    return r
        elif (isinstance(x, numbers.Integral) and not isinstance(x, (builtins.bool, np.bool_))
              and not fits(int(x))):
            return [], int(x)
        return None

    # (NumPy raises for such ints, so they are looked for only after it did)
    if err is not None and not isinstance(data, (np.ndarray, Tensor)):
        found = ints(data)
        if found:
            path, v = found[0][::-1], found[1]
            where, v = _data_path(root, path), _short_repr(v)
            if lo is None:
                return ValueError(f"[{op}] {where} is {v}, too large for {d.name}")
            return ValueError(f"[{op}] {where} is {v}, which {d.name} cannot hold (its range is "
                              f"[{lo}, {hi}]); {fix}")
    if lo is not None:
        with np.errstate(all="ignore"):
            try:
                a = np.asarray(data, dtype=np.float64)
            except (OverflowError, ValueError, TypeError):
                a = None
        if a is not None:
            ok = np.isfinite(a) & (a >= float(lo)) & (a < float(hi) + 1.0)
            if d == _C.dtype.int32:
                ok |= np.isfinite(a) & (a > lo - 1.0) & (a < hi + 1.0)  # truncated toward zero
            for idx in np.argwhere(~ok)[:100]:
                idx = tuple(int(i) for i in idx)
                try:  # an int that float64 rounded up to the edge is checked above, exactly
                    if isinstance(_element(data, idx), numbers.Integral):
                        continue
                except (TypeError, IndexError, KeyError):
                    pass
                v = a[idx]
                where = _data_path(root, idx)
                what = ("an integer tensor holds no NaN or inf" if not np.isfinite(v)
                        else f"its range is [{lo}, {hi}]; {fix}")
                return ValueError(f"[{op}] {where} is {float(v)!r}, which {d.name} cannot hold "
                                  f"({what})")
    if err is not None:
        return ValueError(f"[{op}] could not convert {root} to {d.name}: {err}")
    return None


def _make_tensor(data, d, op="tensor", root="data"):
    """A tensor holding a copy of data, of dtype d (None: inferred as torch.tensor does); the
    data checked first (_data_kinds), its errors naming op and the path under root."""
    if isinstance(data, Tensor):
        d = d or data.dtype
        return data.detach().clone() if data.dtype == d else _C.astype(data.detach(), d)
    if d is None:
        d, kinds = _infer_dtype(data, op, root)
    else:  # checked all the same: None and str are not numbers whatever the dtype
        kinds = _data_kinds(data, op, root)
    if "T" in kinds:  # a list or tuple holding tensors (the walk above saw them)
        return stack([_make_tensor(v, d, op, root) for v in data])
    if d in _INT_RANGE and ("f" in kinds or (isinstance(data, (np.ndarray, np.generic))
                                              and data.dtype.kind == "f")):
        err = _data_error(data, d, op, root)  # NaN, inf or out of range: NumPy would wrap
        if err is not None:
            raise err
    np_dtype = _LT_TO_NP.get(d, np.float32)
    try:
        with np.errstate(all="ignore"):
            arr = np.asarray(data, dtype=np_dtype)  # no copy of an array already this dtype
    except (OverflowError, ValueError) as e:
        raise (_data_error(data, d, op, root, e) or e) from None
    t = _C.from_dlpack(arr, copy=True)  # the one copy (strided arrays are gathered)
    if d != t.dtype:
        t = _C.astype(t, d)  # bfloat16: made from float32
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A tensor holding a copy of `data` (a number, nested lists, a numpy array, a Tensor)."""
    _check_device(device, "tensor")
    return _finish(_make_tensor(data, _check_dtype(dtype, "tensor")), requires_grad)


def as_tensor(data, dtype=None, device=None):
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype):
        return data
    if isinstance(data, np.ndarray) and dtype is None and data.dtype in _NP_TO_LT:
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(a):
    """A tensor over a numpy array's memory (no copy where it is contiguous); like torch, the
    array must not be changed while the tensor is used, and (being lazy) while anything
    computed from it is not yet synced: pending results read the array when they run."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"[from_numpy] expected a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in _NP_TO_LT:
        hint = ("; its byte order is not the machine's: convert with "
                "a.astype(a.dtype.newbyteorder('='))" if a.dtype.kind in "biuf"
                and not a.dtype.isnative else "")
        raise TypeError(f"[from_numpy] numpy dtype {a.dtype} has no lazytrace dtype{hint}")
    if a.dtype.type not in _LT_TO_NP.values():
        return tensor(a)  # int8, uint8, ...: widened, so copied
    return _C.from_dlpack(a)


def from_dlpack(x):
    """A tensor over the memory of a DLPack producer (numpy, torch) where it can share it;
    the producer must not change that memory while results computed from it are pending."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray) and x.dtype.kind in "biuf" and not x.dtype.isnative:
        raise TypeError(f"[from_dlpack] the numpy array's dtype {x.dtype} is not in the machine's "
                        "byte order, which DLPack cannot share: convert with "
                        "a.astype(a.dtype.newbyteorder('=')) (a copy)")
    return _C.from_dlpack(x)


# ---- functions (each method also as a function)
def _dim(input, dim, op):
    """dim of input as a dim in [0, ndim); a 0-d tensor takes 0 and -1 (as torch); else a
    ValueError naming op (the C++ library's wording)."""
    n = builtins.max(input.ndim, 1)
    d = dim if type(dim) is int else _as_dim(dim)
    if d is None:
        raise TypeError(f"[{op}] dim must be an int, got {type(dim).__name__} {_short_repr(dim)}")
    if not -n <= d < n:
        raise ValueError(
            f"[{op}] dim {d} is out of range for a tensor of shape {list(input.shape)} "
            f"({input.ndim}-d): expected a dim in [{-n}, {n - 1}].")
    return d % n


def _as_dim(d):
    """d as an int where it is one (ints, numpy integers, integer tensors of one element), else
    None (a float, a bool, anything else)."""
    if type(d) is int:
        return d
    if isinstance(d, (builtins.bool, np.bool_)):
        return None
    try:
        return operator.index(d)
    except TypeError:
        return None


def _dim_int(d, op):
    """A dim as an int (_as_dim), else a TypeError (torch: "argument 'dim' must be int")."""
    i = _as_dim(d)
    if i is not None:
        return i
    raise TypeError(f"[{op}] dim must be an int or a tuple of ints, got {type(d).__name__} "
                    f"{_short_repr(d)}")


def _dims(dim, op="reduce"):
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(_dim_int(d, op) for d in dim)
    return (_dim_int(dim, op),)


def sum(input, dim=None, keepdim=False, dtype=None):
    dims = _dims(dim, "sum")
    if dtype is None:
        return _C.sum(input, dims, keepdim)
    out = _C.sum(input.to(dtype), dims, keepdim)  # (an integer sum is int64: cast, as torch)
    return out if out.dtype == dtype else _C.astype(out, dtype)


def mean(input, dim=None, keepdim=False, dtype=None):
    dims = _dims(dim, "mean")
    if dtype is not None:
        input = input.to(dtype)
    return _C.mean(input, dims, keepdim)


def _check_nonempty(input, dims, op, what):
    """op's ValueError (in the words of the C++ library's amax) where a reduction over dims
    (None: all) would pick from no elements."""
    if input.numel() != 0:
        return
    shape = tuple(input.shape)
    ds = range(input.ndim) if dims is None else [_dim(input, d, op) for d in dims]
    for d in ds:
        if shape[d] == 0:
            raise ValueError(f"[{op}] cannot reduce over dim {d} of size 0 (shape {list(shape)}): "
                             f"the {what} of nothing is undefined.")


def amax(input, dim=None, keepdim=False):
    return _C.amax(input, _dims(dim, "amax"), keepdim)


def _amin(input, dims, keepdim, op):
    _check_nonempty(input, dims, op, "minimum")
    if input.dtype == _C.dtype.bool:
        return ~_C.amax(~input, dims, keepdim)
    if input.dtype in _FLOATING:
        return -_C.amax(-input, dims, keepdim)
    # integers: -x overflows at the smallest value; -1 - x (that is ~x) never does
    return -1 - _C.amax(-1 - input, dims, keepdim)


def amin(input, dim=None, keepdim=False):
    return _amin(input, _dims(dim, "amin"), keepdim, "amin")


def _any(input, dim, keepdim, op):
    b = input if input.dtype == _C.dtype.bool else input != 0
    dims = _dims(dim, op)
    if dims is not None:
        dims = tuple(_dim(input, d, op) for d in dims)
    if b.numel() == 0:  # nothing is nonzero: False, over any dims (torch)
        if dims is None:
            return full((), False, dtype=_C.dtype.bool)
        shape = [1 if i in dims else n for i, n in enumerate(input.shape)
                 if keepdim or i not in dims]
        return full(tuple(shape), False, dtype=_C.dtype.bool)
    return _C.amax(b, dims, keepdim)


def any(input, dim=None, keepdim=False):
    """torch.any: whether any element (along dim) is nonzero; bool."""
    return _any(input, dim, keepdim, "any")


def all(input, dim=None, keepdim=False):
    """torch.all: whether every element (along dim) is nonzero; bool."""
    b = input if input.dtype == _C.dtype.bool else input != 0
    return ~_any(~b, dim, keepdim, "all")


_MinMax = collections.namedtuple("MinMax", ["values", "indices"])


def _arg_extreme(input, dim, keepdim, largest, op=None):
    op = op or ("argmax" if largest else "argmin")
    if dim is None:
        flat = input.reshape(-1)
        return _arg_extreme(flat, 0, False, largest, op)
    dim = _dim(input, dim, op)
    if input.ndim == 0:  # as torch: dim 0 (or -1) of a 0-d tensor is its one element
        return _C.zeros((), _C.dtype.int64)
    _check_nonempty(input, (dim,), op, "maximum" if largest else "minimum")
    best = (_C.amax(input, (dim,), True) if largest else _amin(input, (dim,), True, op))
    n = input.shape[dim]
    shape = [1] * input.ndim
    shape[dim] = n
    idx = _C.reshape(_C.arange(0.0, float(n), 1.0, _C.dtype.int64), tuple(shape))
    # the first position holding the extreme (NaN counts as the extreme, as torch)
    hit = (input == best) | (input != input)
    pos = where(hit, idx, n)
    out = _amin(pos, (dim,), keepdim, op)
    return out


def argmax(input, dim=None, keepdim=False):
    return _arg_extreme(input, dim, keepdim, True)


def argmin(input, dim=None, keepdim=False):
    return _arg_extreme(input, dim, keepdim, False)


def max(input, dim=None, keepdim=False, *, other=None):
    """max(t): the largest element; max(t, dim): (values, indices); max(a, b): maximum."""
    if other is not None:
        return maximum(input, other)
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    if dim is None:
        _check_nonempty(input, None, "max", "maximum")
        return amax(input)
    return _values_at(input, dim, keepdim, _arg_extreme(input, dim, True, True, "max"), "max")


def min(input, dim=None, keepdim=False, *, other=None):
    if other is not None:
        return minimum(input, other)
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    if dim is None:
        return _amin(input, None, False, "min")
    return _values_at(input, dim, keepdim, _arg_extreme(input, dim, True, False, "min"), "min")


def _values_at(input, dim, keepdim, idx, op):
    """max(dim) / min(dim)'s (values, indices): the values picked at the indices, so that
    their gradient goes to those positions only, as torch's (amax splits it among ties)."""
    d = _dim(input, dim, op)
    values = input
    if input.ndim and input.dtype != _C.dtype.bool:
        n = input.shape[d]
        shape = [1] * input.ndim
        shape[d] = n
        pos = _C.reshape(_C.arange(0.0, float(n), 1.0, _C.dtype.int64), tuple(shape))
        values = _C.sum(_C.where(pos == idx, input, 0), (d,), True)
        if values.dtype != input.dtype:  # an integer sum widens to int64
            values = _C.astype(values, input.dtype)
    elif input.ndim:
        pick = amin if op == "min" else amax
        values = pick(input, d, keepdim=True) if input.shape[d] else input
    if not keepdim and input.ndim:
        values, idx = _C.squeeze(values, d), _C.squeeze(idx, d)
    return _MinMax(values, idx)


def _correction(op, dim, unbiased, correction):
    """torch's var/std forms: (dim, unbiased, keepdim), (unbiased), and correction=."""
    if isinstance(dim, builtins.bool):  # var(True): the var(unbiased) form
        if unbiased is not None:
            raise TypeError(f"[{op}] dim must be an int or a tuple of ints, got bool {dim!r}")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ValueError(f"[{op}] give unbiased or correction, not both")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, correction


def _opmath(dt):
    """The dtype to count in for dt: float32 for the 16-bit floats (as torch's reductions),
    whose range a sum over many elements leaves."""
    return _C.dtype.float32 if dt in (_C.dtype.float16, _C.dtype.bfloat16) else dt


def _var(input, dim, correction, keepdim, op):
    if input.dtype not in _FLOATING:
        raise ValueError(f"[{op}] needs a floating input, got {input.type_str()}; convert first "
                         "with t.to(lt.float32).")
    dims = tuple(_dim(input, d, op) for d in _dims(dim, op)) if dim is not None else ()
    dims = dims if input.ndim else ()  # a 0-d tensor's dim 0 (or -1) is the tensor itself
    dims = dims or tuple(range(input.ndim))
    n = 1
    for d in dims:
        n *= input.shape[d]
    x = _C.astype(input, _opmath(input.dtype))  # (cast back at the end)
    mu = _C.mean(x, dims, True)
    sq = _C.sum((x - mu) * (x - mu), dims, keepdim)
    return _C.astype(sq / float(builtins.max(n - correction, 0)), input.dtype)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _correction("var", dim, unbiased, correction)
    return _var(input, dim, correction, keepdim, "var")


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _correction("std", dim, unbiased, correction)
    return _C.sqrt(_var(input, dim, correction, keepdim, "std"))


def softmax(input, dim=-1, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(input, dim)


def log_softmax(input, dim=-1, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return _C.log_softmax(input, dim)


def _as_operand(x):
    """A tensor, or array data (NumPy, lists) made one, for the functions over tensors."""
    return x if isinstance(x, Tensor) or isinstance(x, numbers.Number) else tensor(x)


def _sequence_of_tensors(tensors, op):
    if isinstance(tensors, Tensor):  # iterating it would join its rows
        raise TypeError(f"[{op}] expects a list or tuple of tensors, got a Tensor "
                        f"({tensors.type_str()}); wrap it in a list: {op}([t, ...])")
    return [_as_operand(t) for t in tensors]


def cat(tensors, dim=0):
    return _C.concat(_sequence_of_tensors(tensors, "cat"), dim)


concat = cat
concatenate = cat


def stack(tensors, dim=0):
    return _C.stack(_sequence_of_tensors(tensors, "stack"), dim)


def where(condition, input, other):
    return _C.where(_as_operand(condition), _as_operand(input), _as_operand(other))


def _result_type(input, other):
    """torch's promotion of a tensor with a tensor, or with a Python number (weak: it only
    lifts the kind, bool < int < float, to the default dtype of that kind)."""
    if isinstance(other, Tensor):
        return _C.promote_types(input.dtype, other.dtype)
    if isinstance(other, builtins.bool) or isinstance(other, np.bool_):
        return input.dtype
    if isinstance(other, numbers.Integral):
        return _C.dtype.int64 if input.dtype == _C.dtype.bool else input.dtype
    if isinstance(other, numbers.Real):
        return input.dtype if input.dtype in _FLOATING else _C.dtype.float32
    raise TypeError(f"expected a tensor or a number, got {type(other).__name__} {other!r}")


def clamp(input, min=None, max=None):
    """torch.clamp: min(max(x, min), max) with the bounds' type promotion (an int tensor with
    float bounds gives float32), NaN kept, max winning where min > max, and gradient 1 to x
    wherever min <= x <= max."""
    if min is None and max is None:
        raise ValueError("[clamp] give min, max or both (at least one must not be None)")
    d = input.dtype
    for b in (min, max):
        if b is not None:
            try:
                d = _C.promote_types(d, _result_type(input, b))
            except TypeError:
                raise TypeError(f"[clamp] min and max must be tensors or numbers, got "
                                f"{type(b).__name__} {b!r}") from None
    out = input if d == input.dtype else _C.astype(input, d)
    try:
        if min is not None:
            out = _C.where(out < min, min if not isinstance(min, Tensor) else _C.astype(min, d), out)
        if max is not None:
            out = _C.where(out > max, max if not isinstance(max, Tensor) else _C.astype(max, d), out)
    except ValueError as e:  # a bound that does not fit the dtype: said of clamp
        text = str(e)
        raise ValueError("[clamp]" + text[4:] if text[:4] in ("[lt]", "[gt]") else text) from None
    return out if out.dtype == d else _C.astype(out, d)


clip = clamp


def floor(input):
    if input.dtype not in _FLOATING:
        return input
    # through int64 (toward zero), one down where that rounded up; from 2**52 on every float
    # is an integer already (and inf and nan stay as they are)
    t = _C.astype(_C.astype(input, _C.dtype.int64), input.dtype)
    t = t - _C.astype(t > input, input.dtype)
    t = _C.where(t == 0, input * 0.0, t)  # -0.0 stays -0.0
    return where(_C.abs(input) < 4503599627370496.0, t, input)


def ceil(input):
    return -floor(-input)


def trunc(input):
    if input.dtype not in _FLOATING:
        return input
    t = _C.astype(_C.astype(input, _C.dtype.int64), input.dtype)
    t = _C.where(t == 0, input * 0.0, t)  # the input's sign on a zero, as torch
    return where(_C.abs(input) < 4503599627370496.0, t, input)


# 2**(mantissa bits): from here on every float of the dtype is an integer
_INTEGRAL_FROM = {_C.dtype.float64: 2.0 ** 52, _C.dtype.float32: 2.0 ** 23,
                  _C.dtype.float16: 2.0 ** 10, _C.dtype.bfloat16: 2.0 ** 7}


def round(input):
    """Half to even, as torch; -0.0 where a negative number rounds to zero."""
    if input.dtype not in _FLOATING:
        return input
    # below 2**p, floor and x - floor(x) are exact in the dtype (x + 0.5 would round)
    f = floor(input)
    frac = input - f
    up = (frac > 0.5) | ((frac == 0.5) & ((f - 2.0 * floor(f * 0.5)) == 1.0))
    r = f + _C.astype(up, input.dtype)
    r = _C.where(r == 0, input * 0.0, r)  # the input's sign on a zero
    return _C.where(_C.abs(input) < _INTEGRAL_FROM[input.dtype], r, input)


def floor_divide(a, b):
    """Python's a // b: rounded down, exact for integers of any size, floats from fmod as
    Python computes them (7.0 // 0.1 is 69.0); an integer // 0 is -1 (as XLA)."""
    return _C.floor_divide(a, b)


def remainder(a, b):
    """Python's a % b: the sign of the divisor, exact for integers; an integer % 0 is a."""
    return _C.remainder(a, b)


def square(input):
    return input * input


def reciprocal(input):
    return 1.0 / input


def logical_and(a, b):
    return where(_as_bool(a), _as_bool(b), False)


def logical_or(a, b):
    return where(_as_bool(a), True, _as_bool(b))


def logical_not(a):
    return _as_bool(a) == False  # noqa: E712


def logical_xor(a, b):
    return _as_bool(a) != _as_bool(b)


def _as_bool(t):
    if isinstance(t, numbers.Number):
        return _C.full((), builtins.bool(t), _C.dtype.bool)
    t = _as_operand(t)  # array data made a tensor
    return t if t.dtype == _C.dtype.bool else t != 0


def _bitwise(name, fn):
    def op(a, b):
        for v in (a, b):
            if isinstance(v, Tensor) and v.dtype != _C.dtype.bool:
                raise TypeError(
                    f"[{name}] is defined on bool tensors here, got {v.type_str()}; compare first "
                    "(t > 0) or use logical_* functions"
                )
        def operand(v, other):
            if isinstance(v, Tensor):
                return v
            if isinstance(v, (builtins.bool, np.bool_)):
                return full_like(other, builtins.bool(v))
            if isinstance(v, (list, tuple, np.ndarray)) and np.asarray(v).dtype == np.bool_:
                return tensor(np.asarray(v))
            raise TypeError(f"[{name}] takes bool tensors, bools or bool arrays here, got "
                            f"{type(v).__name__} {v!r}")

        return fn(operand(a, b), operand(b, a))

    return op


bitwise_and = _bitwise("bitwise_and", logical_and)
bitwise_or = _bitwise("bitwise_or", logical_or)
bitwise_xor = _bitwise("bitwise_xor", logical_xor)


def bitwise_not(a):
    if a.dtype != _C.dtype.bool:
        raise TypeError(f"[bitwise_not] is defined on bool tensors here, got {a.type_str()}")
    return a == False  # noqa: E712


def masked_fill(input, mask, value):
    """torch's masked_fill: value (a number or a 0-d tensor, cast to input's dtype) where the
    bool mask, broadcast to input's shape, is True; the result has input's dtype and shape."""
    if not isinstance(mask, Tensor) or mask.dtype != _C.dtype.bool:
        raise TypeError(f"[masked_fill] mask must be a bool tensor, got "
                        f"{mask.type_str() if isinstance(mask, Tensor) else type(mask).__name__}")
    shape, ms = tuple(input.shape), tuple(mask.shape)
    if len(ms) > len(shape) or builtins.any(m not in (1, s) for m, s in zip(ms[::-1], shape[::-1])):
        raise ValueError(f"[masked_fill] the mask's shape {list(ms)} does not broadcast to the "
                         f"input's shape {list(shape)}; the result keeps the input's shape")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ValueError(f"[masked_fill] value must be a number or a 0-d tensor, got shape "
                             f"{list(value.shape)}; use where(mask, value, input) to fill from "
                             "a tensor")
        value = value if value.dtype == input.dtype else _C.astype(value, input.dtype)
    elif isinstance(value, numbers.Number):
        value = _C.scalar(value, input.dtype)  # cast as torch: 0.5 in an int tensor is 0
    else:
        raise TypeError(f"[masked_fill] value must be a number or a 0-d tensor, got "
                        f"{type(value).__name__}")
    return _C.where(mask, value, input)


def reshape(input, *shape):
    return _C.reshape(input, _size(shape, "reshape"))


def _transpose(input, dim0, dim1, op):
    """torch's transpose: dims in [-ndim, ndim), a 0-d tensor taking 0 and -1 (so that
    transpose(-2, -1) of a 1-d tensor is out of range: torch's IndexError, this library's
    ValueError for a dim out of range, as the C++ op's)."""
    a, b = _dim(input, dim0, op), _dim(input, dim1, op)
    if input.ndim == 0:
        return _C.permute(input, ())
    return _C.transpose(input, a, b)


def transpose(input, dim0, dim1):
    return _transpose(input, dim0, dim1, "transpose")


def swapaxes(input, axis0, axis1):
    return _transpose(input, axis0, axis1, "swapaxes")


def _mT(self):
    if self.ndim < 2:
        raise ValueError(
            f"[mT] transposes the last two dims of a matrix or a batch of matrices, got shape "
            f"{list(self.shape)} ({self.ndim}-d); use .T (which leaves 0-d and 1-d tensors as "
            "they are), or unsqueeze first")
    return _C.transpose(self, -2, -1)


def permute(input, *dims):
    return _C.permute(input, _size(dims, "permute"))


def flip(input, *dims):
    """input with the order of its elements reversed along each of dims (as torch.flip)."""
    if not dims:
        raise TypeError("[flip] give the dims to reverse, e.g. t.flip(0) or lt.flip(t, (0, 1))")
    dims = _size(dims, "flip")
    seen = [_dim(input, d, "flip") for d in dims]
    if len(set(seen)) != len(seen):
        raise ValueError(f"[flip] dims {list(dims)} name a dim more than once "
                         f"(tensor of shape {list(input.shape)})")
    out = input
    for d in seen:
        n = input.shape[d] if input.ndim else 1
        if n > 1:
            out = _C.index_select(out, d, tensor(np.arange(n - 1, -1, -1)))
    return out


def unsqueeze(input, dim):
    return _C.unsqueeze(input, dim)


def squeeze(input, dim=None):
    if input.ndim == 0:  # dim 0 or -1 of a 0-d tensor, as torch: the tensor itself
        for x in _dims(dim, "squeeze") or ():
            _dim(input, x, "squeeze")
        return input
    if dim is None:
        out = input
        for d in reversed(range(input.ndim)):
            if input.shape[d] == 1:
                out = _C.squeeze(out, d)
        return out
    n = builtins.max(input.ndim, 1)
    for x in _dims(dim, "squeeze"):
        if not -n <= x < n:
            raise ValueError(
                f"[squeeze] dim {x} is out of range for a tensor of shape {list(input.shape)} "
                f"({input.ndim}-d): expected a dim in [{-n}, {n - 1}].")
    wanted = [x % n for x in _dims(dim, "squeeze")]
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"[squeeze] dim {tuple(_dims(dim, 'squeeze'))} names a dim more than "
                         f"once (shape {list(input.shape)}); give each dim once")
    for d in sorted((x % n for x in _dims(dim, "squeeze")), reverse=True):
        if input.shape[d] == 1:
            input = _C.squeeze(input, d)
    return input


def view(input, *shape):
    """input.view(*shape): reshape (every tensor here is contiguous, so a view never fails)."""
    return reshape(input, *shape)


def expand(input, *sizes):
    return _expand(input, *sizes)


def contiguous(input):
    return input


def flatten(input, start_dim=0, end_dim=-1):
    s, e = _dim(input, start_dim, "flatten"), _dim(input, end_dim, "flatten")
    if s > e:
        raise ValueError(
            f"[flatten] start_dim {start_dim} comes after end_dim {end_dim} for a tensor of "
            f"shape {list(input.shape)}; give start_dim <= end_dim")
    if input.ndim == 0:
        return _C.reshape(input, (1,))
    n = 1
    for d in input.shape[s : e + 1]:
        n *= d
    return _C.reshape(input, input.shape[:s] + (n,) + input.shape[e + 1 :])


def broadcast_to(input, shape):
    shape = list(shape)
    lead = len(shape) - input.ndim
    for i, s in enumerate(shape):
        if isinstance(s, numbers.Integral) and s == -1 and i >= lead:
            shape[i] = input.shape[i - lead]  # -1: the size the tensor has there, as torch
    return _C.broadcast_to(input, tuple(shape))


def matmul(a, b):
    return _C.matmul(_as_operand(a), _as_operand(b))


def outer(a, b):
    return _C.unsqueeze(a, 1) * _C.unsqueeze(b, 0)  # a product of each pair (autocast leaves it)


def index_select(input, dim, index):
    return _C.index_select(input, dim, index)


def index_add(input, dim, index, source, *, alpha=1):
    return _C.index_add(input, dim, index, source if alpha == 1 else source * alpha)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return builtins.bool(np.allclose(np.asarray(a), np.asarray(b), rtol, atol, equal_nan))


neg = negative = _C.neg
exp, log, log1p, sin, cos, tanh = _C.exp, _C.log, _C.log1p, _C.sin, _C.cos, _C.tanh
sigmoid, relu, gelu, silu = _C.sigmoid, _C.relu, _C.gelu, _C.silu
sqrt, rsqrt, abs, erf, clone = _C.sqrt, _C.rsqrt, _C.abs, _C.erf, _C.clone
add, sub, mul, div = _C.add, _C.sub, _C.mul, _C.div
subtract, multiply, divide, true_divide = _C.sub, _C.mul, _C.div, _C.div
pow, maximum, minimum, atan2 = _C.pow, _C.maximum, _C.minimum, _C.atan2
arctan2 = atan2
eq, ne, lt, le, gt, ge = _C.eq, _C.ne, _C.lt, _C.le, _C.gt, _C.ge
greater, greater_equal, less, less_equal, not_equal = _C.gt, _C.ge, _C.lt, _C.le, _C.ne


def expm1(input):
    """exp(x) - 1, accurate near 0 (Kahan's: (u - 1) * x / log(u) with u = exp(x)); the
    gradient is exp(x), as torch."""
    if input.dtype not in (_C.dtype.float32, _C.dtype.float64):
        # float16 and bfloat16 through float32 (as torch on CPU); integers give float32
        out = expm1(_C.astype(input, _C.dtype.float32))
        return _C.astype(out, input.dtype) if input.dtype in _FLOATING else out
    u = _C.exp(input)
    ud, x = u.detach(), input.detach()
    um1 = ud - 1.0
    safe = (ud != 1.0) & (um1 != -1.0) & (ud != float("inf"))
    kahan = um1 * x / _C.log(_C.where(safe, ud, 2.0))
    value = _C.where(um1 == -1.0, -1.0, kahan)
    # the value carries no gradient; u - ud (exactly 0) carries exp(x)'s
    out = value + (u - ud)
    return _C.where(ud == 1.0, input, _C.where(ud == float("inf"), u, out))


def tan(input):
    return _C.sin(input) / _C.cos(input)


def sign(input):
    if input.dtype == _C.dtype.bool:
        return input  # as torch: True is 1, False 0
    s = _C.astype(input > 0, input.dtype) - _C.astype(input < 0, input.dtype)
    if input.dtype in _FLOATING:
        s = _C.where(input != input, input, s)  # NaN stays NaN
    if input.requires_grad and input.dtype in _FLOATING:
        # a zero gradient, as torch's (not an error): a select that never picks the input
        s = s + _C.where(_C.zeros(tuple(input.shape), _C.dtype.bool), input, 0.0)
    return s


def isnan(input):
    return input != input


def isfinite(input):
    if input.dtype not in _FLOATING:
        return _C.full(tuple(input.shape), True, _C.dtype.bool)
    return (input == input) & (_C.abs(input) != float("inf"))


def detach(input):
    return input.detach()


# ---- indexing
def _index_error(msg):
    raise IndexError(msg)


def _holds_tensor(x):
    if isinstance(x, Tensor):
        return True
    return isinstance(x, (list, tuple)) and builtins.any(_holds_tensor(v) for v in x)


def _getitem(self, idx, info=None):
    """self[idx]; info (a dict), where given, gets what _setitem needs of an integer-tensor
    index: "index" (the tensor), "host" (its values where they came from the host), "size"
    (the size of the dim it indexes) and "pos" (where its dims are in the result)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        _index_error("an index can only have a single ellipsis ('...')")
    used = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if used > self.ndim:
        _index_error(f"too many indices for tensor of dimension {self.ndim} ({used} given)")
    if Ellipsis in [i if i is Ellipsis else None for i in idx]:
        k = [j for j, i in enumerate(idx) if i is Ellipsis][0]
        idx = idx[:k] + (slice(None),) * (self.ndim - used) + idx[k + 1 :]
    t, d = self, 0
    tensor_indices = 0
    of = info["of"] if info and "of" in info else self.type_str()
    src = -1  # the dim of self the index at hand addresses (for messages)
    for i in idx:
        src += i is not None
        if i is None:
            t = _C.unsqueeze(t, d)
            d += 1
        elif isinstance(i, slice):
            size = t.shape[d]
            if i.step is not None and i.step <= 0:
                raise ValueError(f"[index] slice step must be greater than zero (as in torch), "
                                 f"got {i.step}; reverse with t.flip(dim) or index with a list")
            start, stop, step = i.indices(size)
            if stop < start:
                stop = start
            if (start, stop, step) != (0, size, 1):
                t = _C.slice(t, d, start, stop, step)
            d += 1
        elif isinstance(i, (Tensor, list, np.ndarray)):
            host = None
            if not isinstance(i, Tensor):
                data = i
                i = _make_tensor(data, None, "index", "index")  # checked: ragged, None, str
                if not _holds_tensor(data):
                    host = np.asarray(data)
                if i.numel() == 0 and i.dtype in _FLOATING:  # t[[]]: no positions (torch)
                    i = _C.astype(i, _C.dtype.int64)
                    host = host.astype(np.int64) if host is not None else None
            if i.dtype == _C.dtype.bool:
                _index_error(
                    "indexing with a bool mask gives a shape that depends on the data, which a "
                    "traced graph cannot have; use lazytrace.where(mask, x, 0) instead"
                )
            if i.dtype not in (_C.dtype.int32, _C.dtype.int64):
                _index_error(f"tensors used as indices must be integer tensors, got {i.type_str()}")
            tensor_indices += 1
            if tensor_indices > 1:
                _index_error(
                    "indexing with more than one integer tensor is not supported; index one "
                    "dim at a time (t[a][:, b])"
                )
            size = t.shape[d]
            if host is not None and host.size:
                bad = host[(host < -size) | (host >= size)]
                if bad.size:
                    _index_error(f"index {bad.flat[0]} is out of range for dim {src} of size {size} "
                                 f"({of})")
            if info is not None:
                info.update(index=i, host=host, size=size, pos=d)
            # negative indices count from the end, as torch: index_select takes [-size, size)
            # and refuses the rest (here an index is never normalized, so -size - 1 is refused)
            picked = _C.index_select(t, d, _C.reshape(i, (-1,)) if i.ndim != 1 else i)
            t = _C.reshape(picked, t.shape[:d] + i.shape + t.shape[d + 1 :])
            d += i.ndim
        elif isinstance(i, numbers.Integral) and not isinstance(i, builtins.bool):
            size = t.shape[d]
            i = int(i)
            if i < -size or i >= size:
                _index_error(f"index {i} is out of range for dim {src} of size {size} ({of})")
            t = _C.select(t, d, i % size)
        else:
            raise TypeError(
                f"[index] indices must be ints, slices, None, ..., or integer tensors, got "
                f"{type(i).__name__}"
            )
    return t


def _last_writes(info):
    """For an integer-tensor index: a bool tensor of its shape, True at the last occurrence
    of each position (torch and NumPy: of repeated indices, the last write wins); None where
    no position repeats."""
    i, host, size = info["index"], info["host"], info["size"]
    k = i.numel()
    if k < 2:
        return None
    if host is not None:
        flat = host.reshape(-1).astype(np.int64) % builtins.max(size, 1)
        _, first_from_end = np.unique(flat[::-1], return_index=True)
        if first_from_end.size == k:
            return None
        keep = np.zeros(k, np.bool_)
        keep[k - 1 - first_from_end] = True
        return _C.reshape(tensor(keep), i.shape)
    # in the graph: the largest position j writing each index, one bit at a time from the
    # top: of the candidates for an index, those with the bit set, where any has it
    # (O((k + size) log k), not the k x k comparison)
    flat = _C.reshape(_C.astype(i, _C.dtype.int64), (k,))
    flat = _C.where(flat < 0, flat + size, flat)
    flat = _C.where((flat < 0) | (flat >= size), 0, flat)  # out of range: index_select says so
    j = np.arange(k)
    cand = _C.ones((k,), _C.dtype.bool)
    for b in reversed(range((k - 1).bit_length())):
        bit = tensor(((j >> b) & 1).astype(np.bool_))
        has = _C.astype(_C.where(cand, bit, False), _C.dtype.int32)
        any_has = _C.index_select(_C.index_add(_C.zeros((size,), _C.dtype.int32), 0, flat, has),
                                  0, flat) > 0
        cand = _C.where(any_has, _C.where(cand, bit, False), cand)
    return _C.reshape(cand, i.shape)


def _put(self, idx, value):
    """The value of self after self[idx] = value (idx: the indices __getitem__ takes)."""
    n = self.numel()
    info = {"of": self.type_str()}  # (errors name the tensor, not its positions)
    picked = _getitem(_C.reshape(arange(n), self.shape), idx, info)  # flat positions
    flat = _C.reshape(picked, (-1,))
    if isinstance(value, Tensor):
        v = value
    elif isinstance(value, numbers.Number):
        v = full(picked.shape, value, dtype=self.dtype)
    else:
        v = _make_tensor(value, self.dtype, "setitem", "value")
    if v.ndim > picked.ndim and builtins.all(d == 1 for d in v.shape[: v.ndim - picked.ndim]):
        v = _C.reshape(v, tuple(v.shape[v.ndim - picked.ndim :]))  # leading 1s go, as in torch
    try:
        v = _C.broadcast_to(v, picked.shape)
    except ValueError as e:
        raise ValueError(
            f"[setitem] the value's shape {list(v.shape)} does not broadcast to the shape "
            f"{list(picked.shape)} the index picks ({e})") from None
    v = _C.reshape(v, (-1,))
    work = _C.dtype.int32 if self.dtype == _C.dtype.bool else self.dtype
    v = _C.astype(v, work)
    hits = ones(flat.shape[0], dtype=_C.dtype.int32)
    keep = _last_writes(info) if "index" in info else None
    if keep is not None:  # only the last write to a position contributes
        pos = info["pos"]
        keep = _C.reshape(keep, (1,) * pos + tuple(keep.shape)
                          + (1,) * (picked.ndim - pos - keep.ndim))
        keep = _C.reshape(_C.broadcast_to(keep, picked.shape), (-1,))
        v = _C.where(keep, v, -0.0)
        hits = _C.astype(keep, _C.dtype.int32)
    hit = _C.index_add(zeros(n, dtype=_C.dtype.int32), 0, flat, hits)
    # added to -0.0, which keeps every value (a -0.0 written stays -0.0)
    spread = _C.astype(_C.index_add(full((n,), -0.0, dtype=work), 0, flat, v), self.dtype)
    return where(_C.reshape(hit > 0, self.shape), _C.reshape(spread, self.shape), self)


def _as_mask(idx):
    """idx as a bool mask (a bool tensor, NumPy array or list), or None."""
    if isinstance(idx, Tensor):
        return idx if idx.dtype == _C.dtype.bool else None
    if isinstance(idx, np.ndarray):
        return idx if idx.dtype == np.bool_ else None
    if isinstance(idx, list) and idx and not _holds_tensor(idx):
        try:
            a = np.asarray(idx)
        except ValueError:  # ragged: _getitem says so
            return None
        return a if a.dtype == np.bool_ else None
    return None


def _put_masked(self, mask, value):
    """The value of self after self[mask] = value: a k-d mask covers self's first k dims (as
    torch and NumPy); the value broadcasts to the rows it selects, or, with the selected
    count as its first dim, gives them their values in order."""
    host = mask if isinstance(mask, np.ndarray) else None
    shape, k = tuple(self.shape), mask.ndim
    if tuple(mask.shape) != shape[:k]:
        _index_error(
            f"[setitem] the mask's shape {list(mask.shape)} must match the first {k} dims of "
            f"the indexed tensor's shape {list(shape)}")
    rest = shape[k:]
    if isinstance(value, Tensor):
        v = value
    elif isinstance(value, numbers.Number):
        v = value
    else:
        v = _make_tensor(value, self.dtype, "setitem", "value")
    if isinstance(v, Tensor) and v.ndim > len(rest):
        if v.ndim == len(rest) + 1 and v.shape[0] == 1:
            v = _C.reshape(v, tuple(v.shape[1:]))
        elif v.ndim == len(rest) + 1:  # one row of values per selected row, in order
            if host is None:
                try:
                    host = _numpy(mask, True)
                except _C.TraceReadError:
                    raise ValueError(
                        f"[setitem] x[mask] = value with {v.shape[0]} rows of values needs the "
                        "number of True in the mask, which a traced function cannot read; give a "
                        "value that broadcasts to one selected row, or write "
                        "x.copy_(lazytrace.where(mask, values, x)) with values of x's shape"
                    ) from None
            count = int(host.sum())
            if v.shape[0] != count:
                raise ValueError(
                    f"[setitem] the value's shape {list(v.shape)} does not match the "
                    f"{count} rows the mask selects (shape {[count, *rest]})")
            rows = int(np.prod(shape[:k], dtype=np.int64))
            flat = _C.reshape(self, (rows,) + rest)
            put = _put(flat, tensor(np.flatnonzero(host.reshape(-1))), v)
            return _C.reshape(put, shape)
        else:
            raise ValueError(
                f"[setitem] the value's shape {list(v.shape)} does not broadcast to the rows "
                f"the mask selects (shape [count, {', '.join(map(str, rest))}])")
    if isinstance(mask, np.ndarray):
        mask = tensor(mask)
    m = _C.reshape(mask, tuple(mask.shape) + (1,) * len(rest))
    v = full_like(self, v) if not isinstance(v, Tensor) else _C.astype(v, self.dtype)
    return where(m, v, self)


def _setitem(self, idx, value):
    """t[idx] = value with torch's semantics (every holder sees it), for the indices
    __getitem__ takes and bool masks: the positions the index picks get the value (the last
    one where an index repeats), the rest keep theirs."""
    mask = _as_mask(idx)
    self.copy_(_put(self, idx, value) if mask is None else _put_masked(self, mask, value))


# ---- methods whose argument forms are Python's
def _to(self, *args, **kwargs):
    """to(dtype), to(device), to(device, dtype), to(other): device 'cpu' only."""
    d = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    for a in args:
        if isinstance(a, dtype):
            d = a
        elif isinstance(a, Tensor):
            d = a.dtype
        elif a in (builtins.float, builtins.int, builtins.bool) or isinstance(a, np.dtype) or (
                isinstance(a, type) and issubclass(a, np.generic)):
            d = a  # float (float64, as torch), np.float32, ...
        else:
            device = a
    _check_device(device, "to")
    d = _check_dtype(d, "to")
    if d is None or d == self.dtype:
        return self
    return _C.astype(self, d)


def _repr(self):
    shown = self if self.ndim <= _MAX_NDIM else _C.reshape(self, (-1,))  # NumPy's dims limit
    try:
        if self.dtype == _C.dtype.bfloat16:
            arr = _C.astype(shown, _C.dtype.float32)._host()
        else:
            arr = shown._host()
    except _C.TraceReadError:
        return f"tensor(<traced {self.type_str()}>)"
    body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000)
    extra = ""
    if (self.numel() == 0 and self.ndim != 1) or shown is not self:  # the shape, as torch
        extra += f", size={tuple(self.shape)}"
    if self.dtype not in (_C.dtype.float32, _C.dtype.int64, _C.dtype.bool):
        extra += f", dtype={self.dtype!r}"
    if self.requires_grad:
        extra += ", requires_grad=True"
    return f"tensor({body}{extra})"


def _numpy(self, force=False):
    if self.requires_grad and not force and not _modes.tracing():  # traced: the read's error
        raise RuntimeError(
            "Can't call numpy() on a Tensor that requires grad. Use tensor.detach().numpy() instead."
        )
    if self.dtype == _C.dtype.bfloat16:
        raise TypeError(
            "[numpy] NumPy has no bfloat16; convert first: t.float().numpy()"
        )
    if self.ndim > _MAX_NDIM:
        raise ValueError(f"[numpy] NumPy arrays have at most {_MAX_NDIM} dims, got a {self.ndim}-d "
                         f"tensor of shape {list(self.shape)}; reshape it first")
    return self._host().copy()


def _array(self, dtype=None, copy=None):
    if copy is False:  # NumPy 2's protocol: say so where a copy cannot be avoided
        raise ValueError("[__array__] a lazytrace tensor cannot be viewed by NumPy without a "
                         "copy; use np.asarray(t) or t.numpy() (copies)")
    a = _numpy(self, force=True)
    return a.astype(dtype) if dtype is not None else a


def _format(self, spec):
    """f"{loss:.4f}": a 0-d tensor formats its value, as torch's."""
    if self.ndim == 0:
        return format(self.item(), spec)
    return object.__format__(self, spec)


def _contains(self, element):
    """x in t: whether any element equals x, as torch's."""
    if not isinstance(element, (Tensor, numbers.Number, np.generic)):
        raise RuntimeError(f"[__contains__] x in t takes a tensor or a number, got "
                           f"{type(element).__name__}")
    return builtins.bool(any(self == element).item())


def _bool(self):
    if self.numel() == 0:
        raise RuntimeError(f"[__bool__] Boolean value of a tensor with no values is ambiguous "
                           f"({self.type_str()})")
    if self.numel() != 1:
        raise RuntimeError(f"[__bool__] Boolean value of a tensor with more than one value is "
                           f"ambiguous ({self.type_str()}); use t.any() or t.all()")
    return builtins.bool(self.item())


def _in_place_operator(name, op):
    """a op= b as torch's: a's value is replaced (every holder sees it), its dtype and shape
    stay."""
    def iop(self, other):
        if not isinstance(other, _OPERANDS):
            return NotImplemented  # Python's own TypeError, as for the other operators
        # under autograd the op reads a handle of its own (the copy_ gives self a new value)
        v = op(self.clone() if _C.is_grad_enabled() else self, other)
        if v is NotImplemented:
            return NotImplemented
        if tuple(v.shape) != tuple(self.shape):
            raise ValueError(f"[{name}] an in-place op on {self.type_str()} gave "
                             f"{v.type_str()}: the result must keep the tensor's shape")
        return self.copy_(_castable_in_place(name, self, v))

    return iop


def _castable_in_place(name, self, v):
    """v, where an in-place op may write it into self: not a floating result into an integer
    or bool tensor, nor a non-bool one into a bool tensor (torch's rule)."""
    if ((v.dtype in _FLOATING and self.dtype not in _FLOATING)
            or (self.dtype == _C.dtype.bool and v.dtype != _C.dtype.bool)):
        raise RuntimeError(f"[{name}] an in-place op on {self.type_str()} gave {v.type_str()}: "
                           "the result type can't be cast to the tensor's dtype in place (as in "
                           "torch); use an out-of-place op or convert first")
    return v


def _size_method(self, dim=None):
    if dim is None:
        return self.shape
    n = self.ndim
    if not isinstance(dim, numbers.Integral) or isinstance(dim, builtins.bool):
        raise TypeError(f"[size] dim must be an int, got {type(dim).__name__} {dim!r}")
    if not -n <= dim < n:
        raise IndexError(
            f"[size] dim {dim} is out of range for a tensor of shape {list(self.shape)} ({n}-d)"
            + (f": expected a dim in [{-n}, {n - 1}]" if n else ": a 0-d tensor has no dims"))
    return self.shape[dim]


def _t(self):
    if self.ndim > 2:
        raise ValueError(
            f"[t] expects a tensor with at most 2 dims, got shape {list(self.shape)} "
            f"({self.ndim}-d); use transpose(dim0, dim1) or permute(...)")
    return _C.transpose(self, 0, 1) if self.ndim == 2 else self


def _expand(self, *sizes):
    sizes = _size(sizes, "expand")
    lead = len(sizes) - self.ndim
    if lead < 0:
        raise ValueError(
            f"[expand] {len(sizes)} sizes given for a tensor of shape {list(self.shape)} "
            f"({self.ndim}-d): give at least one size per dim")
    for i, s in enumerate(sizes[:lead]):
        if s == -1:
            raise ValueError(
                f"[expand] size -1 (keep the dim's size) at {i}, a new leading dim of "
                f"{list(sizes)} for a tensor of shape {list(self.shape)}: give its size")
    shape = tuple(
        (self.shape[i - lead] if s == -1 else s) for i, s in enumerate(sizes)
    )
    return _C.broadcast_to(self, shape)


def _index_int(self):
    if self.dtype not in (_C.dtype.int32, _C.dtype.int64, _C.dtype.bool) or self.numel() != 1:
        raise TypeError(f"only integer tensors of a single element can be converted to an index, got {self.type_str()}")
    return builtins.int(self.item())


def _rebuild(cls, array, dtype, requires_grad, state):
    """pickle's way back: the values (bfloat16 travels as float32, exactly), the dtype, the
    subclass (Parameter, Buffer) and its attributes, and requires_grad."""
    new = cls.__new__(cls)
    Tensor.__init__(new, _C.astype(tensor(array), dtype))
    if state:
        new.__dict__.update(state)
    if requires_grad:
        new.requires_grad_(True)
    return new


def _reduce_ex(self, protocol):
    """pickle (and torch.save-style use of it): the tensor's values, synced if pending."""
    values = self.float() if self.dtype == _C.dtype.bfloat16 else self
    return (_rebuild, (type(self), _numpy(values, True), self.dtype, self.requires_grad,
                       dict(getattr(self, "__dict__", None) or {})))


def _deepcopy(self, memo):
    """A new tensor with the same value (and requires_grad, and subclass: Parameter)."""
    if id(self) in memo:
        return memo[id(self)]
    cls = type(self)
    new = cls.__new__(cls)
    Tensor.__init__(new, _C.clone(self.detach()))
    if getattr(self, "__dict__", None):
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    return new


def _in_place(name, self, fn, *args):
    """self.copy_(fn(self, *args)), with fn reading a handle of its own under autograd: the
    copy gives self a new value, and fn's gradient must still see the old one."""
    src = _C.clone(self) if _C.is_grad_enabled() else self
    return self.copy_(_castable_in_place(name, self, fn(src, *args)))


def _zero_(self):
    return self.copy_(zeros_like(self))


def _fill_(self, value):
    return self.copy_(_filled(self.shape, value, self.dtype, "fill_"))


_OPERANDS = (Tensor, numbers.Number, np.ndarray, np.generic, list, tuple)


def _operator(fn, reflected=False):
    """A binary operator over fn: NotImplemented for an operand that is not a tensor, a
    number or an array (None, an object of another library's), so Python tries the other
    side's method and then raises its own TypeError, as for + and *."""
    def op(self, other):
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return fn(other, self) if reflected else fn(self, other)

    op.__name__ = fn.__name__
    return op


def _install_methods():
    T = Tensor
    methods = {
        "__getitem__": _getitem,
        "__setitem__": _setitem,
        "__repr__": _repr,
        "__str__": _repr,
        "__array__": _array,
        "__float__": lambda s: builtins.float(s.item()),
        "__int__": lambda s: builtins.int(s.item()),
        "__bool__": _bool,
        "__format__": _format,
        "__contains__": _contains,
        "__ifloordiv__": _in_place_operator("__ifloordiv__", floor_divide),
        "__imod__": _in_place_operator("__imod__", remainder),
        "__ipow__": _in_place_operator("__ipow__", operator.pow),
        "__iand__": _in_place_operator("__iand__", bitwise_and),
        "__ior__": _in_place_operator("__ior__", bitwise_or),
        "__ixor__": _in_place_operator("__ixor__", bitwise_xor),
        "__index__": _index_int,
        "__floordiv__": _operator(floor_divide),
        "__rfloordiv__": _operator(floor_divide, reflected=True),
        "__mod__": _operator(remainder),
        "__rmod__": _operator(remainder, reflected=True),
        "__and__": _operator(bitwise_and),
        "__rand__": _operator(bitwise_and, reflected=True),
        "__or__": _operator(bitwise_or),
        "__ror__": _operator(bitwise_or, reflected=True),
        "__xor__": _operator(bitwise_xor),
        "__rxor__": _operator(bitwise_xor, reflected=True),
        "__invert__": bitwise_not,
        "__iter__": lambda s: (s[i] for i in range(len(s))),
        "__deepcopy__": _deepcopy,
        "__reduce_ex__": _reduce_ex,
        "__copy__": lambda s: s,
        "numpy": _numpy,
        "tolist": lambda s: _numpy(s.float() if s.dtype == _C.dtype.bfloat16 else s, True).tolist(),
        "size": _size_method,
        "to": _to,
        "type": lambda s, d=None: s.dtype if d is None else _to(s, d),
        "type_as": lambda s, o: _to(s, o.dtype),
        "float": lambda s: _to(s, _C.dtype.float32),
        "double": lambda s: _to(s, _C.dtype.float64),
        "half": lambda s: _to(s, _C.dtype.float16),
        "bfloat16": lambda s: _to(s, _C.dtype.bfloat16),
        "long": lambda s: _to(s, _C.dtype.int64),
        "int": lambda s: _to(s, _C.dtype.int32),
        "bool": lambda s: _to(s, _C.dtype.bool),
        "cpu": lambda s: s,
        "contiguous": lambda s: s,
        "view_as": lambda s, o: _C.reshape(s, o.shape),
        "reshape_as": lambda s, o: _C.reshape(s, o.shape),
        "swapaxes": swapaxes,
        "squeeze": squeeze,
        "flatten": flatten,
        "expand": _expand,
        "expand_as": lambda s, o: _C.broadcast_to(s, o.shape),
        "broadcast_to": broadcast_to,
        "t": _t,
        "T": property(lambda s: _C.permute(s, tuple(reversed(range(s.ndim))))),
        "mT": property(_mT),
        "transpose": transpose,
        "flip": flip,
        "sum": sum,
        "mean": mean,
        "amax": amax,
        "any": any,
        "all": all,
        "amin": amin,
        "max": max,
        "min": min,
        "argmax": argmax,
        "argmin": argmin,
        "var": var,
        "std": std,
        "softmax": softmax,
        "log_softmax": log_softmax,
        "matmul": matmul,
        "index_select": index_select,
        "index_add": index_add,
        "masked_fill": masked_fill,
        "clamp": clamp,
        "clip": clamp,
        "floor": floor,
        "ceil": ceil,
        "round": round,
        "trunc": trunc,
        "square": square,
        "reciprocal": reciprocal,
        "sign": sign,
        "isnan": isnan,
        "isfinite": isfinite,
        "expm1": expm1,
        "tan": tan,
        "zero_": _zero_,
        "fill_": _fill_,
        "clamp_": lambda s, min=None, max=None: _in_place("clamp_", s, clamp, min, max),
        "numel": T.numel,
        "element_size": lambda s: s.dtype.itemsize,
        "nelement": T.numel,
        "device": property(lambda s: "cpu"),
        "is_floating_point": lambda s: s.dtype in _FLOATING,
    }
    for name in ("neg", "exp", "log", "log1p", "sin", "cos", "tanh", "sigmoid", "relu", "gelu", "silu",
                 "sqrt", "rsqrt", "abs", "erf", "clone"):
        methods[name] = getattr(_C, name)
        methods[name + "_"] = (lambda n, f: lambda s: _in_place(n, s, f))(name + "_",
                                                                           getattr(_C, name))
    for name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2", "eq", "ne", "lt",
                 "le", "gt", "ge"):
        methods[name] = getattr(_C, name)
    methods["negative"] = _C.neg
    methods["pow_"] = lambda s, e: _in_place("pow_", s, _C.pow, e)
    method_type = type(T.numel)  # the extension's own methods bind self already
    for name, fn in methods.items():
        if callable(fn) and not isinstance(fn, (types.FunctionType, method_type, property)):
            fn = _as_method(fn)  # an extension function (no __get__): bind self here
        setattr(T, name, fn)


def _as_method(f):
    def method(self, *args, **kwargs):
        return f(self, *args, **kwargs)

    method.__name__ = getattr(f, "__name__", "method")
    method.__doc__ = getattr(f, "__doc__", None)
    return method


_install_methods()
Tensor.__array_ufunc__ = None  # ndarray + t is t.__radd__(ndarray): a Tensor, as in torch

# what `from lazytrace._tensor import *` (lazytrace's namespace) takes: the functions, not
# the modules this file uses
__all__ = [n for n, v in dict(globals()).items()
           if not n.startswith("_") and not isinstance(v, types.ModuleType)]
