"""torch.optim.lr_scheduler for lazytrace's optimizers. Each step() writes the new rate into
param_groups[i]["lr"], which the update reads as a tensor: a schedule never recompiles a
step, one compiled with lt.compile included.

Every scheduler sets the rate from base_lrs (each group's "initial_lr") and last_epoch, as
torch's closed forms do, so results do not drift with rounding over long runs. Two
schedulers stepping one optimizer therefore do not multiply; run them one after another
with SequentialLR.
"""

import bisect
import math

from . import Optimizer


def _check_int(op, name, value, low, what):
    """value must be an int (not a bool) >= low; else a ValueError saying it is `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"[{op}] {name} must be {what}, got {value!r}")


class LRScheduler:
    """Base class: subclasses define get_lr() (one rate per param group) from self.base_lrs
    and self.last_epoch, as torch's do."""

    def __init__(self, optimizer, last_epoch=-1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[{name}] optimizer must be a lazytrace.optim optimizer, got "
                            f"{type(optimizer).__name__}")
        _check_int(name, "last_epoch", last_epoch, -1, "an int >= -1")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"[{name}] param_groups[{i}] has no 'initial_lr' to resume "
                                   f"from at last_epoch={last_epoch}; make the scheduler with "
                                   "last_epoch=-1, or load its state_dict")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._step_count = 0
        self.step()

    def _groups(self, name, values):
        """One value per param group: a list as long as param_groups, or one for all."""
        n = len(self.optimizer.param_groups)
        if isinstance(values, (list, tuple)):
            if len(values) != n:
                raise ValueError(f"[{type(self).__name__}] expected {n} {name} (one per param "
                                 f"group), got {len(values)}")
            return list(values)
        return [values] * n

    def get_lr(self):
        """The rates for self.last_epoch, one per param group."""
        return [self._lr_at(base, self.last_epoch) for base in self.base_lrs]

    def _lr_at(self, base, epoch):
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def get_last_lr(self):
        """The rates the last step() set."""
        return self._last_lr

    def step(self, epoch=None):
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch  # may be fractional
        values = self.get_lr()
        if len(values) != len(self.optimizer.param_groups):
            raise ValueError(f"[{type(self).__name__}] get_lr() gave {len(values)} rates for "
                             f"{len(self.optimizer.param_groups)} param groups")
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        """Everything but the optimizer (and functions, which do not pickle)."""
        return {k: v for k, v in self.__dict__.items()
                if k != "optimizer" and not callable(v) and k != "lr_lambdas"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """base_lr * lr_lambda(epoch); lr_lambda a function, or one per param group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.optimizer = optimizer
        lambdas = lr_lambda if isinstance(lr_lambda, (list, tuple)) else None
        self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups) if lambdas is None else list(
            lambdas)
        if len(self.lr_lambdas) != len(optimizer.param_groups):
            raise ValueError(f"[LambdaLR] expected {len(optimizer.param_groups)} lr_lambdas "
                             f"(one per param group), got {len(self.lr_lambdas)}")
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"[LambdaLR] lr_lambda must be callable, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]


class StepLR(LRScheduler):
    """base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        _check_int("StepLR", "step_size", step_size, 1, "a positive int")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return base * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """base_lr * gamma ** (the number of milestones <= epoch)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return base * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ConstantLR(LRScheduler):
    """base_lr * factor for the first total_iters epochs, then base_lr."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if not 0 <= factor <= 1:
            raise ValueError(f"[ConstantLR] factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return base * (self.factor if epoch < self.total_iters else 1.0)


class LinearLR(LRScheduler):
    """base_lr times a factor going linearly from start_factor to end_factor over
    total_iters epochs (a warmup with the defaults' shape), then end_factor."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"[LinearLR] start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"[LinearLR] end_factor must be in [0, 1], got {end_factor}")
        _check_int("LinearLR", "total_iters", total_iters, 0, "an int >= 0")
        self.start_factor, self.end_factor, self.total_iters = (start_factor, end_factor,
                                                                total_iters)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        if self.total_iters == 0:
            return base * self.end_factor
        done = min(self.total_iters, epoch) / self.total_iters
        return base * (self.start_factor + (self.end_factor - self.start_factor) * done)


class ExponentialLR(LRScheduler):
    """base_lr * gamma ** epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return base * self.gamma ** epoch


class PolynomialLR(LRScheduler):
    """base_lr * (1 - min(epoch, total_iters) / total_iters) ** power."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        _check_int("PolynomialLR", "total_iters", total_iters, 1, "a positive int")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return base * (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if not T_max > 0:
            raise ValueError(f"[CosineAnnealingLR] T_max must be positive, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, base, epoch):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch /
                                                                    self.T_max)) / 2


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every T_i epochs, T_0 first, each period T_mult times the
    one before (SGDR)."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        _check_int("CosineAnnealingWarmRestarts", "T_0", T_0, 1, "a positive int")
        _check_int("CosineAnnealingWarmRestarts", "T_mult", T_mult, 1, "an int >= 1")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def _period(self, epoch):
        """(epochs into the current period, its length), counted in integers (a logarithm
        rounds wrong at some restarts)."""
        if self.T_mult == 1:
            return epoch % self.T_0, self.T_0
        start, period = 0, self.T_0
        while epoch >= start + period:
            start += period
            period *= self.T_mult
        return epoch - start, period

    def _lr_at(self, base, epoch):
        t, period = self._period(max(epoch, 0))
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * t / period)) / 2


class SequentialLR(LRScheduler):
    """schedulers[0] until milestones[0], then schedulers[1] from its own epoch 0, and so on
    (e.g. a LinearLR warmup, then CosineAnnealingLR)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        schedulers, milestones = list(schedulers), [int(m) for m in milestones]
        if not schedulers:
            raise ValueError("[SequentialLR] expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler) or isinstance(s, ReduceLROnPlateau):
                raise TypeError(f"[SequentialLR] schedulers[{i}] is a {type(s).__name__}, not "
                                "an epoch scheduler")
            if s.optimizer is not optimizer:
                raise ValueError(f"[SequentialLR] schedulers[{i}] steps another optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"[SequentialLR] expects {len(schedulers) - 1} milestones (one "
                             f"fewer than the schedulers), got {len(milestones)}")
        if milestones != sorted(milestones):
            raise ValueError(f"[SequentialLR] milestones must increase, got {milestones}")
        self._schedulers, self._milestones = schedulers, milestones
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[i]
        s.last_epoch = self.last_epoch - (self._milestones[i - 1] if i else 0)
        values = s.get_lr()
        s._last_lr = values
        return values

    def state_dict(self):
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for s, saved in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(saved)
        self.__dict__.update(state)


class ReduceLROnPlateau(LRScheduler):
    """Multiplies the rates by factor when the metric passed to step(metric) has not improved
    for patience epochs (reading the metric computes it, as float() does)."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if not 0 <= factor < 1:
            raise ValueError(f"[ReduceLROnPlateau] factor must be in [0, 1), got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"[ReduceLROnPlateau] mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"[ReduceLROnPlateau] threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[ReduceLROnPlateau] optimizer must be a lazytrace.optim "
                            f"optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.min_lrs = self._groups("min_lr", min_lr)
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def _better(self, a, best):
        sign = 1 if self.mode == "min" else -1
        if self.threshold_mode == "rel":
            return sign * a < sign * best * (1 - sign * self.threshold)
        return sign * a < sign * best - self.threshold

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
