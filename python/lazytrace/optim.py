"""torch.optim.SGD and AdamW over the C++ optimizers: step() records the update lazily (one
graph with the forward and backward, cached from the second step on), and the learning
rate is a tensor the update reads, so changing param_groups[i]["lr"] never recompiles."""

from . import _lazytrace as _C
from ._lazytrace import Tensor


class Optimizer:
    _fixed = ()  # hyperparameters the C++ optimizer was made with; only lr may change later

    def __init__(self, params, defaults):
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of Tensors or of dicts, got a Tensor")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups = []
        self._impls = []
        self.state = {}
        for g in groups:
            group = dict(self.defaults)
            group.update(g)
            group["params"] = list(group["params"])
            for p in group["params"]:
                if not isinstance(p, Tensor):
                    raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
            self.param_groups.append(group)
            self._impls.append(self._make(group))
            group["_made_with"] = {k: group[k] for k in self._fixed}

    def _make(self, group):
        raise NotImplementedError

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, impl in zip(self.param_groups, self._impls):
            for k, v in group["_made_with"].items():
                if group[k] != v:
                    raise ValueError(
                        f"[{type(self).__name__}] param_groups[...]['{k}'] changed from {v} to "
                        f"{group[k]}; only 'lr' can change after the optimizer is made "
                        "(make a new optimizer for other changes)"
                    )
            if group["lr"] != impl.lr:
                impl.lr = float(group["lr"])
            impl.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if not k.startswith("_") and k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines + [")"])


class SGD(Optimizer):
    """torch.optim.SGD: lr, momentum, dampening, weight_decay (L2), nesterov."""

    _fixed = ("momentum", "dampening", "weight_decay", "nesterov")

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"[SGD] lr, momentum and weight_decay must be >= 0, got {lr}, "
                             f"{momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("[SGD] nesterov needs a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _make(self, g):
        return _C._SGD(g["params"], float(g["lr"]), float(g["momentum"]), float(g["dampening"]),
                       float(g["weight_decay"]), bool(g["nesterov"]))


class AdamW(Optimizer):
    """torch.optim.AdamW (decoupled weight decay), one fused update per parameter."""

    _fixed = ("betas", "eps", "weight_decay")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        if amsgrad:
            raise ValueError("[AdamW] amsgrad is not supported")
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"[AdamW] invalid lr {lr}, eps {eps} or betas {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def _make(self, g):
        b1, b2 = g["betas"]
        return _C._AdamW(g["params"], float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                         float(g["weight_decay"]))
