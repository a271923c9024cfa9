"""nn.Module with torch's semantics: assigned Parameters, buffers and Modules register
themselves, names join with dots, and the tree of modules is walked for parameters, state
dicts, train/eval and dtype conversion."""

from collections import OrderedDict

from .. import _modes, _tools
from .._lazytrace import Tensor
from .._tensor import _check_device, _check_dtype, dtype
from .parameter import Buffer, Parameter, _optimized


_version = [0]  # bumped whenever any module's parameters, buffers or submodules change


# bumped whenever a module attribute is set or deleted (its settings may change: what
# scan_layers compares from layer to layer) or the module tree changes
_settings_version = [0]


def settings_version():
    return _settings_version[0]


def registry_version():
    """A number that changes whenever a parameter, buffer or submodule of any module is
    added, replaced or removed (so a cache of named_parameters() knows it is still right)."""
    return _version[0]


def _changed():
    _version[0] += 1


def _structure_changed(module):
    """A parameter, buffer or submodule of `module` was added, replaced or removed. Where a
    function traced once (assume_pure, compile, scan with is_fn_pure) may have seen the module
    (such a trace began or ended since the module was made), the tools' structure epoch moves
    on, so their next call traces again rather than reuse the tensors or modules the old
    trace closed over. A module made since (being constructed, or made inside a trace) cannot
    have been seen: building one costs no retrace. A copied or unpickled module counts as
    seen. functional_call's temporary swaps are not structural changes."""
    _version[0] += 1
    _settings_version[0] += 1
    if module.__dict__.get("_lazytrace_born") is not _tools._TRACE_ERA[0]:
        _tools._STRUCTURE_EPOCH[0] += 1


_MISSING = object()


class _Registry(OrderedDict):
    """A module's parameters, buffers or submodules, each also kept in the module's __dict__
    so that `self.weight` in forward is a plain attribute read rather than a failed lookup
    and a __getattr__ call. A name the class defines (a method, a property) is not mirrored,
    so it is never shadowed, as in torch where the registries are only a fallback. Every
    way of changing the dict keeps the mirror exact."""

    def __init__(self, owner):
        super().__init__()
        self._owner = owner

    def _mirror(self, key, value):
        owner = self.__dict__.get("_owner")
        if owner is not None and isinstance(key, str) and \
                getattr(type(owner), key, _MISSING) is _MISSING:
            owner.__dict__[key] = value

    def _unmirror(self, key):
        owner = self.__dict__.get("_owner")
        if owner is not None and isinstance(key, str):
            owner.__dict__.pop(key, None)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._mirror(key, value)

    def __delitem__(self, key):
        super().__delitem__(key)
        self._unmirror(key)
        self._removed()

    def pop(self, key, *default):
        if key in self:
            self._unmirror(key)
            self._removed()
        return super().pop(key, *default)

    def popitem(self, last=True):
        key, value = super().popitem(last)
        self._unmirror(key)
        self._removed()
        return key, value

    def clear(self):
        for key in list(self):
            self._unmirror(key)
        if self:
            self._removed()
        super().clear()

    def _removed(self):
        # a removal is a structural change (the renumbering of ModuleList.insert and del
        # clears the registry first); functional_call's temporary swaps only set items
        owner = self.__dict__.get("_owner")
        if owner is not None:
            _structure_changed(owner)

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs):
        for key, value in OrderedDict(*args, **kwargs).items():
            self[key] = value

    def __repr__(self):
        return repr(OrderedDict(self))

    def __reduce__(self):  # copies and pickles rebuild through __setitem__, owner first
        return (_rebuild_registry, (self._owner, list(self.items())))


def _rebuild_registry(owner, items):
    r = _Registry(owner)
    for key, value in items:
        r[key] = value  # sets only (a copy being built changes no traced module)
    return r


class Module:
    """The base of every layer: subclass it, assign Parameters, buffers (register_buffer)
    and Modules in __init__, write forward(), and call the module."""

    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "_parameters", _Registry(self))
        object.__setattr__(self, "_buffers", _Registry(self))
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", _Registry(self))
        object.__setattr__(self, "training", True)
        # when it was made, against the traces of compile/assume_pure/scan (is_fn_pure): a
        # change to a module no trace can have seen needs no retrace (_structure_changed)
        self.__dict__["_lazytrace_born"] = _tools._TRACE_ERA[0]

    @property
    def training(self):
        """Whether the module is in training mode (train()) or evaluation mode (eval()). A
        function traced once by compile, assume_pure or scan that reads it is traced again
        when it flips."""
        _modes.read(self)
        return self.__dict__["_lazytrace_training"]

    @training.setter
    def training(self, mode):
        mode = bool(mode)
        if self.__dict__.get("_lazytrace_training") is not mode:  # model.train() each step
            _settings_version[0] += 1                               # keeps scan_layers' check
            self.__dict__["_lazytrace_training"] = mode

    # ---- registration
    def __setattr__(self, name, value):
        _settings_version[0] += 1
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(
                f"cannot assign '{name}' before Module.__init__() call: call super().__init__() "
                "first in your __init__"
            )
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if name in params or name in buffers or name in modules or isinstance(
                value, (Parameter, Module, Buffer)):
            old = params.get(name, buffers.get(name, modules.get(name, _MISSING)))
            if old is value:  # the same object again (m.w = m.w): nothing changes
                _changed()
            else:
                _structure_changed(self)

        def claim(store):
            for other in (d, params, buffers, modules):
                if other is not store:
                    other.pop(name, None)

        def expect(what, ok):
            if not ok:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as {what} '{name}' of "
                    f"{type(self).__name__} ({what} or None expected)"
                )

        if isinstance(value, Parameter):
            claim(params)
            params[name] = value
        elif isinstance(value, Module):
            claim(modules)
            modules[name] = value
        elif isinstance(value, Buffer):
            claim(buffers)
            buffers[name] = value
            if not value.persistent:
                d["_non_persistent"].add(name)
        elif name in params:
            expect("parameter", value is None)
            params[name] = None
        elif name in buffers:
            expect("buffer", value is None or isinstance(value, Tensor))
            buffers[name] = value
        elif name in modules:
            expect("module", value is None)
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # on every parameter and submodule access in forward: unrolled, no loop
        d = self.__dict__
        params = d.get("_parameters")
        if params is not None:
            if name in params:
                return params[name]
            modules = d["_modules"]
            if name in modules:
                return modules[name]
            buffers = d["_buffers"]
            if name in buffers:
                return buffers[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        _settings_version[0] += 1
        for store in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[store]:
                del self.__dict__[store][name]  # _Registry: a structural change
                return
        object.__delattr__(self, name)

    def _what_is(self, name, class_names_ok=False):
        """What `name` already names on this module ("a parameter", "a method of Linear", ...),
        or None; class attributes are looked up on the class, so no property runs (and are
        not counted with class_names_ok)."""
        d = self.__dict__
        for store, what in (("_parameters", "a parameter"), ("_buffers", "a buffer"),
                            ("_modules", "a submodule")):
            if name in d[store]:
                return what
        if name in d:
            return "an attribute"
        attr = _MISSING if class_names_ok else getattr(type(self), name, _MISSING)
        if attr is not _MISSING:
            kind = "a method" if callable(attr) else "an attribute"
            return f"{kind} of {type(self).__name__}"
        return None

    def _check_name(self, op, kind, name, store, class_names_ok=False):
        """torch's checks on a name given to register_buffer / register_parameter / add_module:
        a non-empty str without dots that names nothing else on the module (registering
        again over the same kind replaces it)."""
        if not isinstance(name, str):
            raise TypeError(f"[{op}] {kind} name should be a string, got "
                            f"{type(name).__name__}")
        if "." in name:
            raise KeyError(f"[{op}] {kind} name cannot contain \".\", got \"{name}\": dots "
                           "join the names of nested modules; register it on the submodule, or "
                           "pick a name without dots")
        if name == "":
            raise KeyError(f"[{op}] {kind} name cannot be the empty string \"\": give it a name")
        if name not in self.__dict__[store]:
            what = self._what_is(name, class_names_ok)
            if what is not None:
                fix = "pick another name" + (
                    "" if " of " in what else f", or remove it first (del module.{name})")
                raise KeyError(f"[{op}] attribute '{name}' already exists ({what}): {fix}")

    def _register(self, store, name, value):
        """self.<store>[name] = value: a structural change (_structure_changed) unless it
        held value already."""
        registry = self.__dict__[store]
        replaces = registry.get(name, _MISSING) is not value
        registry[name] = value
        if replaces:
            _structure_changed(self)
        else:
            _changed()

    def register_buffer(self, name, tensor, persistent=True):
        if "_buffers" not in self.__dict__:
            raise AttributeError("[Module.register_buffer] cannot assign buffer before "
                                 "Module.__init__() call: call super().__init__() first")
        self._check_name("Module.register_buffer", "buffer", name, "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"[Module.register_buffer] '{name}' must be a Tensor or None, got "
                            f"{type(tensor).__name__}")
        self._register("_buffers", name, tensor)
        if not persistent:
            self._non_persistent.add(name)
        else:
            self._non_persistent.discard(name)

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("[Module.register_parameter] cannot assign parameter before "
                                 "Module.__init__() call: call super().__init__() first")
        self._check_name("Module.register_parameter", "parameter", name, "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"[Module.register_parameter] '{name}' must be a Parameter or None, "
                            f"got {type(param).__name__}; wrap it: nn.Parameter(t)")
        self._register("_parameters", name, param)

    def add_module(self, name, module):
        self._add_module(name, module, "Module.add_module")

    def _add_module(self, name, module, op, class_names_ok=False):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"[{op}] '{name}' must be a Module or None, got "
                            f"{type(module).__name__}")
        self._check_name(op, "module", name, "_modules", class_names_ok)
        self._register("_modules", name, module)

    register_module = add_module

    # ---- calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- walking the tree
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named(self, store, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse
                else [(prefix, self)])
        for mp, m in mods:
            for name, t in m.__dict__[store].items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield mp + ("." if mp else "") + name, t

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        m = self
        for part in target.split(".") if target else []:
            if part not in m._modules:
                raise AttributeError(f"{type(m).__name__} has no submodule '{part}'")
            m = m._modules[part]
        return m

    def get_parameter(self, target):
        mod, _, name = target.rpartition(".")
        return self.get_submodule(mod)._parameters[name]

    # ---- state
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        out = OrderedDict() if destination is None else destination
        # every name of a shared submodule, as torch's (and of a tied tensor)
        for mp, m in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            for name, p in m._parameters.items():
                if p is not None:
                    out[mp + ("." if mp else "") + name] = p if keep_vars else p.detach()
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    out[mp + ("." if mp else "") + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copies the tensors into this module's parameters and buffers (copy_: every holder
        sees them), or with assign=True makes them the module's own (their dtype kept; a
        parameter keeps requires_grad), as torch's. strict: the names must match exactly.
        Everything is checked before anything is copied."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}: missing keys "
                f"{missing}, unexpected keys {unexpected}"
            )
        import numpy as np

        for k, v in state_dict.items():
            if k in own and not isinstance(v, (Tensor, np.ndarray)):
                raise RuntimeError(
                    f"[Module.load_state_dict] Error(s) in loading state_dict for "
                    f"{type(self).__name__}: while copying the parameter named \"{k}\", expected "
                    f"a Tensor (or a NumPy array) from the checkpoint but received "
                    f"{type(v)}; convert it first, e.g. lazytrace.tensor(value)")
        for k, v in state_dict.items():
            if k in own and tuple(own[k].shape) != tuple(v.shape):
                raise RuntimeError(
                    f"Error(s) in loading state_dict for {type(self).__name__}: size mismatch "
                    f"for {k}: copying a param with shape {tuple(v.shape)}, the shape in the "
                    f"current model is {tuple(own[k].shape)}"
                )
        from .._tools import no_grad

        from .._tensor import tensor
        from .parameter import Parameter

        with no_grad():
            for k, v in state_dict.items():
                if k not in own:
                    continue
                if not isinstance(v, Tensor):  # a NumPy array
                    v = tensor(v)
                if not assign:
                    own[k].copy_(v)
                    continue
                path, _, name = k.rpartition(".")
                m = self.get_submodule(path)
                if name in m._parameters:  # (a structural change: traces see the new one)
                    m._register("_parameters", name, Parameter(v.detach(), own[k].requires_grad))
                else:
                    m._register("_buffers", name, v.detach())
        from collections import namedtuple

        return namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])(missing, unexpected)

    # ---- modes and conversion
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Resets the parameters' gradients: to None (set_to_none=True), or each existing
        gradient to zeros in place (set_to_none=False; a None gradient stays None)."""
        for p in self.parameters():
            g = p.grad
            if g is None or set_to_none:
                p.grad = None  # (also where None: inside compile that marks it cleared)
                continue
            if g.requires_grad:
                g = g.detach()
                p.grad = g
            g.zero_()

    def _apply(self, fn):
        _changed()
        done = {}  # id -> the converted tensor: a tensor held twice (tied weights) stays one
        replaced = {}  # id -> a module whose tensors were replaced by converted ones

        def convert(t, make):
            if id(t) not in done:
                new = fn(t)
                done[id(t)] = (t, t if new is t else make(new, t))
            return done[id(t)][1]

        for m in self.modules():
            for name, p in list(m._parameters.items()):
                if p is not None:
                    new = convert(
                        p, lambda new, old: Parameter(new, requires_grad=old.requires_grad))
                    if new is not p:
                        replaced[id(m)] = m
                    m._parameters[name] = new
            for name, b in list(m._buffers.items()):
                if b is not None:
                    new = convert(b, lambda new, old: new)
                    if new is not b:
                        replaced[id(m)] = m
                    m._buffers[name] = new
        for m in replaced.values():
            _structure_changed(m)
        return self

    def to(self, *args, **kwargs):
        """to(dtype) converts floating parameters and buffers; to('cpu') is a no-op (another
        device is a ValueError naming the devices this build has)."""
        d = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        for a in args:
            if isinstance(a, dtype):
                d = a
            else:
                device = a
        _check_device(device, "Module.to")
        d = _check_dtype(d, "Module.to")
        if d is None:
            return self
        if not d.is_floating_point:
            raise TypeError(f"Module.to only accepts floating dtypes, got {d!r}")
        for name, p in self.named_parameters():  # before anything is converted
            if p.dtype.is_floating_point and p.dtype != d and _optimized(p):
                raise ValueError(
                    f"[Module.to] parameter '{name}' ({p.type_str()}) is held by an optimizer "
                    f"made before this conversion to {d}, which would keep updating the old "
                    "tensor: convert the module first, then make the optimizer")
        return self._apply(lambda t: t.to(d) if t.dtype.is_floating_point else t)

    def float(self):
        return self.to(dtype.float32)

    def double(self):
        return self.to(dtype.float64)

    def half(self):
        return self.to(dtype.float16)

    def bfloat16(self):
        return self.to(dtype.bfloat16)

    def cpu(self):
        return self

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- printing
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(([extra] if extra else []) + lines) + "\n)"

    def __dir__(self):
        return list(super().__dir__()) + list(self._parameters) + list(self._buffers) + list(self._modules)
