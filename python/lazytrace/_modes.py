"""The train()/eval() flags a traced function reads, as guards: a function traced once
(compile, assume_pure, scan with is_fn_pure) has the flags of its trace built in (dropout on
or off), so each tool keys its traces also on the flags it saw read, as torch.compile guards
on module.training. The guard goes to the C++ cache with each call, which pushes it while it
traces the function, and which of its flags have flipped is part of the key."""

import threading
import weakref

_local = threading.local()


def _recorders():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def read(module):
    """Module.training's getter: the module, to every guard tracing now."""
    stack = getattr(_local, "stack", None)
    if stack:
        for guard in stack:
            guard.add(module)


def tracing():
    """Whether a guard is recording on this thread (a trace is running)."""
    return bool(getattr(_local, "stack", None))


class Guard:
    """The modules one traced function was seen to read, each with its flag when first read.
    key() is () while every flag is as first read (the traces made before any flipped keep
    their key), else the positions of the flipped ones: a trace per combination met."""

    __slots__ = ("modules", "_seen")

    def __init__(self):
        self.modules = []  # (weakref to the module, its flag when first read)
        self._seen = weakref.WeakSet()

    def add(self, module):
        if module in self._seen:
            return
        self._seen.add(module)
        self.modules.append((weakref.ref(module), module.__dict__["_lazytrace_training"]))

    def key(self):
        if not self.modules:
            return ()
        flipped = []
        for i, (ref, first) in enumerate(self.modules):
            m = ref()
            if m is not None and m.__dict__["_lazytrace_training"] != first:
                flipped.append(i)
        return tuple(flipped)

    def call_key(self):
        """This call's part of the C++ cache's key: 0 while nothing has flipped, else key() as
        an int. Also tells an enclosing trace what the function reads (a hit reads nothing)."""
        if not self.modules:
            return 0
        self.tell_enclosing()
        k = self.key()
        return hash(k) & 0x7FFFFFFFFFFFFFFF | 1 if k else 0

    # the C++ caches call these around the function while they trace it
    def _push(self):
        _recorders().append(self)

    def _pop(self):
        _recorders().pop()

    def tell_enclosing(self):
        """An enclosing trace depends on the flags this function reads, traced now or before."""
        stack = getattr(_local, "stack", None)
        if stack:
            for outer in stack:
                for ref, _ in self.modules:
                    m = ref()
                    if m is not None:
                        outer.add(m)
