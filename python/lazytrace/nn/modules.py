"""The layers of torch.nn that transformer models use."""

import collections.abc
import math
import numbers
import operator
from collections import OrderedDict

from .. import _lazytrace as _C
from .._tensor import _check_device, _check_dtype, ones, rand, randn, zeros
from . import functional as F
from .module import Module, _structure_changed
from .parameter import Parameter


def _count(op, name, value):
    """value as an int >= 0 (a layer's size): else torch's TypeError / ValueError, naming op."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"[{op}] {name} must be an int >= 0, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"[{op}] {name} must be >= 0, got {value}")
    return int(value)


def _normalized_shape(op, normalized_shape):
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        return (_count(op, "normalized_shape", normalized_shape),)
    if not isinstance(normalized_shape, collections.abc.Iterable):
        raise TypeError(f"[{op}] normalized_shape must be an int or a sequence of ints, got "
                        f"{type(normalized_shape).__name__} {normalized_shape!r}")
    return tuple(_count(op, "normalized_shape", d) for d in normalized_shape)


def _uniform(shape, bound, dtype):
    return rand(*shape, dtype=dtype) * (2.0 * bound) - bound


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x Wᵀ + b, weight [out_features, in_features], initialized as torch's
    (uniform in ±1/sqrt(in_features))."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        _check_device(device, "Linear")
        dtype = _check_dtype(dtype, "Linear") or _C.dtype.float32
        in_features = _count("Linear", "in_features", in_features)
        out_features = _count("Linear", "out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = Parameter(_uniform((out_features, in_features), bound, dtype))
        if bias:
            self.bias = Parameter(_uniform((out_features,), bound, dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None):
        super().__init__()
        _check_device(device, "Embedding")
        dtype = _check_dtype(dtype, "Embedding") or _C.dtype.float32
        num_embeddings = _count("Embedding", "num_embeddings", num_embeddings)
        embedding_dim = _count("Embedding", "embedding_dim", embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            padding_idx = F._padding_index(padding_idx, num_embeddings, "Embedding")
        self.padding_idx = padding_idx
        w = randn(num_embeddings, embedding_dim, dtype=dtype)
        if padding_idx is not None:
            keep = _C.reshape(_C.arange(0.0, float(num_embeddings), 1.0, _C.dtype.int64) != padding_idx,
                              (num_embeddings, 1))
            w = _C.where(keep, w, 0.0)
        self.weight = Parameter(w)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                 dtype=None):
        super().__init__()
        _check_device(device, "LayerNorm")
        dtype = _check_dtype(dtype, "LayerNorm") or _C.dtype.float32
        self.normalized_shape, self.eps = _normalized_shape("LayerNorm", normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(zeros(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        _check_device(device, "RMSNorm")
        dtype = _check_dtype(dtype, "RMSNorm") or _C.dtype.float32
        self.normalized_shape, self.eps = _normalized_shape("RMSNorm", normalized_shape), eps
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        F._check_p("Dropout", p)
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)


class Tanh(Module):
    def forward(self, input):
        return _C.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return _C.sigmoid(input)


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return _C.softmax(input, self.dim)


def _index(container, idx, op):
    """idx (an int, negative counting from the end) as a position in container, or torch's
    IndexError / TypeError."""
    name = type(container).__name__
    try:
        idx = operator.index(idx)
    except TypeError:
        raise TypeError(f"[{name}.{op}] indices must be integers or slices, not "
                        f"{type(idx).__name__}") from None
    n = len(container._modules)
    if not -n <= idx < n:
        raise IndexError(f"[{name}.{op}] index {idx} is out of range for a {name} of {n} "
                         f"modules: use an index in [{-n}, {n})")
    return idx % n


def _delete(container, idx):
    """del container[idx] (an int or a slice); the modules left are renumbered "0", "1", ...
    as torch's ModuleList and Sequential do."""
    items = list(container._modules.values())
    if isinstance(idx, slice):
        del items[idx]
    else:
        del items[_index(container, idx, "__delitem__")]
    _renumber(container, items)


def _renumber(container, items):
    """Makes container's modules exactly `items` (modules), registered as "0", "1", ..."""
    modules = container._modules
    modules.clear()
    for i, m in enumerate(items):
        modules[str(i)] = m
    _structure_changed(container)  # (clear() counts only a removal: not an insert into [])


class ModuleList(Module):
    """A list of modules, registered as "0", "1", ... (kept contiguous by insert and del, as
    torch's)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError("[ModuleList.extend] expects an iterable of modules, got "
                            f"{type(modules).__name__}")
        for m in list(modules):  # a list, so that ml.extend(ml) ends
            self.append(m)
        return self

    def insert(self, index, module):
        """Inserts module before index, as list.insert (an index past either end clamps)."""
        if not isinstance(module, Module):
            raise TypeError(f"[ModuleList.insert] expects a Module, got {type(module).__name__}")
        items = list(self._modules.values())
        items.insert(operator.index(index), module)
        _renumber(self, items)

    def pop(self, idx=-1):
        m = self[idx]
        del self[idx]
        return m

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(self, idx, "__getitem__"))]

    def __setitem__(self, idx, module):
        setattr(self, str(_index(self, idx, "__setitem__")), module)

    def __delitem__(self, idx):
        _delete(self, idx)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        if not isinstance(other, collections.abc.Iterable):
            return NotImplemented
        return ModuleList(list(self) + list(other))

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))

    def forward(self, *args):
        raise NotImplementedError("ModuleList has no forward(): iterate over it, or use scan_layers")


class Sequential(Module):
    """Modules called in order: Sequential(m0, m1, ...) registers them as "0", "1", ...;
    Sequential(OrderedDict(name=module, ...)) keeps the names."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):  # a Sequential that keeps the names, as torch's
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(self, idx, "__getitem__")]

    def __setitem__(self, idx, module):
        setattr(self, list(self._modules)[_index(self, idx, "__setitem__")], module)

    def __delitem__(self, idx):
        _delete(self, idx)

    def pop(self, idx):
        m = self[idx]
        del self[idx]
        return m

    append = ModuleList.append

    def insert(self, index, module):
        """Inserts module before index (-len <= index <= len); the modules are renumbered
        "0", "1", ..."""
        if not isinstance(module, Module):
            raise TypeError(f"[Sequential.insert] expects a Module, got {type(module).__name__}")
        n = len(self._modules)
        index = operator.index(index)
        if not -n <= index <= n:
            raise IndexError(f"[Sequential.insert] index {index} is out of range for a "
                             f"Sequential of {n} modules: use an index in [{-n}, {n}]")
        items = list(self._modules.values())
        items.insert(index if index >= 0 else index + n, module)
        _renumber(self, items)
        return self

    def extend(self, sequential):
        for m in list(sequential):
            self.append(m)
        return self

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"[Sequential.__add__] only a Sequential can be added to a "
                             f"Sequential, got {type(other).__name__}; wrap it: "
                             "Sequential(*modules)")
        return Sequential(*self, *other)

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"[Sequential.__iadd__] only a Sequential can be added to a "
                             f"Sequential, got {type(other).__name__}; use extend() for a list")
        return self.extend(other)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleDict(Module):
    """Modules by name. A key may be named like a method ("items", "type"): it is only
    reached as d[key], and never hides the method (torch refuses such keys, its issue
    71203)."""

    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self._add_module(k, m, "ModuleDict.__setitem__", class_names_ok=True)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()
