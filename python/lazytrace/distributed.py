"""Data parallelism: ranks that run the same step on their slices of the global batch.

    import lazytrace as lt
    import lazytrace.distributed as dist

    dist.init()                                  # under mpirun: MPI; else one process
    model = Decoder(...)
    ddp = dist.DataParallel(model)               # rank 0's weights on every rank
    opt = lt.optim.AdamW(model.parameters())

    @lt.compile
    def step(x, y):
        loss = lt.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        ddp.all_reduce_gradients()               # part of the step's one graph
        opt.step()
        opt.zero_grad()
        return ddp.average(loss)

    begin, end = dist.shard(global_batch)        # this rank's rows

Collectives (all_reduce, reduce_scatter, all_gather, broadcast) are graph ops like any
other, with gradients; every rank must issue the same ones in the same order, and ranks
whose graphs issue different ones get a RuntimeError instead of a hang. `run_threads(n, fn)`
runs n ranks as threads of this process, for tests without mpirun.
"""

import math

from . import _lazytrace as _C
from ._tools import no_grad
from .nn.utils import clip_grads_with_norm_, get_total_norm

_d = _C._dist

init = _d.init
built_with_mpi = _d.built_with_mpi
launched_by_mpi = _d.launched_by_mpi
get_rank = rank = _d.rank
get_world_size = world_size = _d.world_size
barrier = _d.barrier
set_timeout = _d.set_timeout
timeout = _d.timeout


def shard(n):
    """Rows [begin, end) of this rank in a global batch of n (n splits evenly over ranks)."""
    return _d.shard(n)


def run_threads(n, fn):
    """Runs fn(rank) on n threads, each a rank of one group; returns when all returned.
    An exception in one rank fails the others' collectives and is raised here."""
    _d.run_threads(n, fn)


def all_reduce(tensor, op="sum", scale=1.0):
    """The reduction over ranks ("sum", "mean", "max", "min") times scale, on every rank.
    Its gradient is the all_reduce (sum) of the gradients, times scale."""
    return _d.all_reduce(tensor, op, scale)


def reduce_scatter(tensor, op="sum", scale=1.0):
    """This rank's block of dim 0 of all_reduce(tensor, op, scale)."""
    return _d.reduce_scatter(tensor, op, scale)


def all_gather(tensor):
    """The ranks' tensors joined along dim 0, rank 0 first."""
    return _d.all_gather(tensor)


def broadcast(tensor, src=0):
    """Rank src's tensor on every rank (not differentiable)."""
    return _d.broadcast(tensor, src)


def _joined(parts):
    """The parts one after another: a copy, unless there is one."""
    return parts[0] if len(parts) == 1 else _C.concat(parts, 0)


def _range_of(named, lo, hi):
    """Elements [lo, hi) of the (name, tensor) values flattened one after another, zeros past
    their end."""
    parts, at = [], 0
    for _, t in named:
        a, b = max(lo, at), min(hi, at + t.numel())
        if a < b:
            parts.append(t.detach().reshape(-1)[a - at:b - at])
        at += t.numel()
    if hi > max(lo, at):
        parts.append(_C.zeros([hi - max(lo, at)], named[0][1].dtype))
    return _joined(parts)


class DataParallel:
    """Averages (or sums) a module's gradients over the ranks, like PyTorch's
    DistributedDataParallel: reduce_gradients() after backward all-reduces them in buckets
    of up to bucket_cap_mb, in reverse parameter order (the order backward makes them), the
    1/N scale folded into the reduction. Made with broadcast_parameters, every rank starts
    from rank 0's parameters and buffers.

    With shard_optimizer (ZeRO-1), parameters() are this rank's shards of the buckets (give
    them to the optimizer): reduce_gradients() reduce-scatters the gradients onto them, the
    optimizer updates 1/N of the elements on each rank, and gather_parameters() after its
    step all-gathers them into the module. The shards take the parameters' values at each
    reduce_gradients(), so weights loaded into the module after this is made are what the
    step updates. The optimizer must update elementwise; a parameter without a gradient gets
    a zero one there (AdamW still decays it); frozen parameters are left out.

    reduce_dtype (a floating dtype; None: each gradient's own): the gradients are cast to it
    for their collectives and back after, as FSDP's MixedPrecision(reduce_dtype=...) and
    DDP's bf16_compress_hook do: with lt.bfloat16 lt::dist's exchange moves half the bytes
    of float32 gradients, rounding each rank's gradient and their mean (summed in float32)
    to bfloat16; one rank rounds alike. The C++ DataParallelOptions::reduce_dtype says where
    it does not halve them (LAZYTRACE_MPI_ALL_REDUCE=mpi, ZeRO-1's all-gather)."""

    def __init__(self, module, bucket_cap_mb=4, average=True, broadcast_parameters=True,
                 shard_optimizer=False, reduce_dtype=None):
        if not 0 < bucket_cap_mb < float("inf"):
            raise ValueError(f"[DataParallel] bucket_cap_mb must be a positive finite number, "
                             f"got {bucket_cap_mb}.")
        if reduce_dtype is not None and not (isinstance(reduce_dtype, _C.dtype)
                                             and reduce_dtype.is_floating_point):
            raise TypeError(f"[DataParallel] reduce_dtype must be a floating dtype (bfloat16, "
                            f"float16, float32 or float64), got {reduce_dtype}.")
        self.reduce_dtype = reduce_dtype
        self.module = module
        self.bucket_bytes = int(bucket_cap_mb * 2**20)
        self.op = "mean" if average else "sum"
        self.buckets = []
        if broadcast_parameters:
            self.broadcast_parameters()
        self._shards = self._make_shards() if shard_optimizer else None

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def broadcast_parameters(self):
        if world_size() == 1:
            return
        with no_grad():
            for _, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
                t.copy_(broadcast(t.detach(), 0))

    def _buckets_of(self, named):
        """(name, tensor) pairs split into buckets of one dtype and at most bucket_bytes."""
        out, size = [], 0
        for name, t in named:
            nbytes = t.numel() * t.element_size()
            if not out or out[-1][0][1].dtype != t.dtype or size + nbytes > self.bucket_bytes:
                out.append([])
                size = 0
            out[-1].append((name, t))
            size += nbytes
        return out

    def _make_shards(self):
        """The all-reduce's buckets of the trained parameters (a parameter of bucket_bytes or
        more alone, so that its reduce-scatter reads the gradient where it lies and the
        all-gather's result becomes the parameter), flattened and padded:
        [(params [(name, param)], numel, padded, shard)]."""
        n, r = world_size(), rank()
        shards = []
        trained = [(name, p) for name, p in self.module.named_parameters() if p.requires_grad]
        with no_grad():
            for bucket in self._buckets_of(reversed(trained)):
                numel = sum(p.numel() for _, p in bucket)
                padded = -(-numel // n) * n
                per = padded // n
                shards.append((bucket, numel, padded, _range_of(bucket, r * per, (r + 1) * per)))
        # every parameter first: every rank computes the same broadcasts in the same order,
        # whatever its range
        _C.sync([p for _, p in trained] + [s[3] for s in shards])
        return [(b, numel, padded, s.detach().requires_grad_()) for b, numel, padded, s in shards]

    def parameters(self):
        """What the optimizer updates: the module's parameters, or (ZeRO-1) this rank's shards."""
        if self._shards is None:
            return list(self.module.parameters())
        return [s[3] for s in self._shards]

    def reduce_gradients(self):
        self.buckets = []
        with no_grad():
            if self._shards is not None:
                for bucket, numel, padded, shard in self._shards:
                    # the parameters are what counts: a load or broadcast_parameters() since
                    # the last step reaches the optimizer
                    begin = rank() * shard.numel()
                    shard.copy_(_range_of(bucket, begin, begin + shard.numel()))
                    parts = [p.grad.reshape(-1) if p.grad is not None else
                             _C.zeros([p.numel()], p.dtype) for _, p in bucket]
                    if padded > numel:
                        parts.append(_C.zeros([padded - numel], bucket[0][1].dtype))
                    shard.grad = _C.astype(reduce_scatter(self._joined_in(parts), self.op),
                                           shard.dtype)
                    self.buckets.append([name for name, _ in bucket])
                for p in self.module.parameters():
                    p.grad = None
                return
            if world_size() == 1 and self.reduce_dtype is None:  # (with it, rounded alike)
                return
            named = [(name, p) for name, p in reversed(list(self.module.named_parameters()))
                     if p.grad is not None]
            for bucket in self._buckets_of(named):
                self._reduce(bucket)

    all_reduce_gradients = reduce_gradients

    def gather_parameters(self):
        """ZeRO-1: after the optimizer step, every rank's shards into the parameters."""
        if self._shards is None:
            return
        with no_grad():
            for bucket, _, _, shard in self._shards:
                full = all_gather(shard.detach())
                at = 0
                for _, p in bucket:
                    p.copy_(full[at:at + p.numel()].reshape(p.shape))
                    at += p.numel()

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """After reduce_gradients(): nn.utils.clip_grad_norm_ over the gradients the optimizer
        reads, returning their norm. With ZeRO-1 each rank holds a part of them, so the parts'
        norms are all-reduced into the global one; every rank clips by it."""
        params = self.parameters()
        total = get_total_norm([p.grad for p in params if p.grad is not None], norm_type)
        if self._shards is not None and world_size() > 1:
            with no_grad():
                if math.isinf(norm_type):
                    total = all_reduce(total, "max")
                else:  # the parts' sums of |g|^p add up
                    total = all_reduce(total ** norm_type, "sum") ** (1.0 / norm_type)
        clip_grads_with_norm_(params, max_norm, total)
        return total

    def average(self, tensor):
        """The mean over ranks of a value (e.g. the loss, for the log)."""
        return all_reduce(tensor.detach(), "mean")

    def optimizer_state(self, optimizer):
        """The state of `optimizer` (made over parameters()) per module parameter, whole:
        {name: {"step": ..., "exp_avg": ..., ...}}, like PyTorch FSDP's optim_state_dict.
        With ZeRO-1 each rank holds its shards' part, so this all-gathers it (a collective, run
        before it returns: every rank calls it, and every rank gets all of it). Saved, it resumes on any number of ranks, sharded
        or not, and in one process (load_optimizer_state)."""
        state = optimizer.state_dict()["state"]
        out, gathered = {}, []
        for i, owner in enumerate(self._owners(optimizer, "optimizer_state")):
            if self._shards is None:
                out[owner] = dict(state[i])
                continue
            bucket = self._shards[owner][0]
            with no_grad():
                for k, t in state[i].items():
                    # "step" is one count for the shard's parameters; the rest are elementwise
                    whole = t if k == "step" else all_gather(t.detach())
                    gathered.append(whole)
                    at = 0
                    for name, p in bucket:
                        out.setdefault(name, {})[k] = (
                            t if k == "step" else whole[at:at + p.numel()].reshape(p.shape))
                        at += p.numel()
        # run on every rank at once: a rank that later reads only its own copy (rank 0
        # saving) would otherwise run the all-gathers alone, waiting for the others for good
        _C.sync(gathered)
        return out

    def load_optimizer_state(self, optimizer, state):
        """Loads whole per-parameter state (optimizer_state()'s) into `optimizer`, made over
        parameters(): with ZeRO-1, this rank's part of each shard. No communication; the
        optimizer's hyperparameters stay its own."""
        def of(name):
            if name not in state:
                raise ValueError(f"[DataParallel] load_optimizer_state: no state for parameter "
                                 f"'{name}'; load the state of an optimizer over the same "
                                 "module")
            return state[name]

        saved = optimizer.state_dict()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for i, owner in enumerate(self._owners(optimizer, "load_optimizer_state")):
            if self._shards is None:
                if owner in state or params[i].requires_grad:
                    saved["state"][i] = dict(of(owner))
                else:  # frozen: ZeRO-1 keeps no state for it; it starts anew
                    del saved["state"][i]
                continue
            bucket, _, _, shard = self._shards[owner]
            part = {}
            with no_grad():
                for k, t in of(bucket[0][0]).items():
                    if k == "step":  # one count per shard: its parameters' must agree
                        for name, _ in bucket[1:]:  # (0: never updated, as the optimizer's)
                            other = of(name).get(k)
                            if other is not None and float(other) and float(t) and \
                                    float(other) != float(t):
                                raise ValueError(
                                    f"[DataParallel] load_optimizer_state: parameters "
                                    f"'{bucket[0][0]}' and '{name}' share a shard but were "
                                    f"updated {float(t):g} and {float(other):g} times; ZeRO-1 "
                                    "keeps one count per shard: resume this state without "
                                    "shard_optimizer")
                            if other is not None and float(other) > float(t):
                                t = other
                        part[k] = t
                        continue
                    values = []
                    for name, p in bucket:
                        v = of(name).get(k)
                        if v is None or tuple(v.shape) != tuple(p.shape):
                            raise ValueError(
                                f"[DataParallel] load_optimizer_state: parameter '{name}' "
                                f"({p.dtype} {tuple(p.shape)}) has " +
                                (f"no '{k}'" if v is None else
                                 f"'{k}' of shape {tuple(v.shape)}") +
                                "; load the state of an optimizer over the same module")
                        values.append((name, v))
                    per = shard.numel()
                    part[k] = _range_of(values, rank() * per, (rank() + 1) * per)
            saved["state"][i] = part
        optimizer.load_state_dict(saved)

    def _owners(self, optimizer, what):
        """For each of the optimizer's parameters, in its order: the index of its shard
        (ZeRO-1) or its name in the module."""
        if self._shards is None:
            names = {}
            for name, p in self.module.named_parameters():
                names.setdefault(id(p), name)
        else:
            names = {id(s[3]): j for j, s in enumerate(self._shards)}
        out = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in names:
                    raise ValueError(
                        f"[DataParallel] {what}: the optimizer updates a {p.dtype} "
                        f"{tuple(p.shape)} tensor that is not " +
                        ("a parameter of the module" if self._shards is None else
                         "one of this DataParallel's shards") +
                        "; make the optimizer over dp.parameters()")
                out.append(names[id(p)])
        return out

    def _joined_in(self, parts):
        """The parts joined in reduce_dtype where it is set, each cast as it is copied in."""
        if self.reduce_dtype is not None:
            parts = [_C.astype(t, self.reduce_dtype) for t in parts]
        return _joined(parts)

    def _reduce(self, bucket):
        if not bucket:
            return
        self.buckets.append([name for name, _ in bucket])
        if len(bucket) == 1:
            p = bucket[0][1]
            p.grad = _C.astype(all_reduce(self._joined_in([p.grad]), self.op), p.dtype)
            return
        flat = all_reduce(self._joined_in([p.grad.reshape(-1) for _, p in bucket]), self.op)
        at = 0
        for _, p in bucket:
            n = p.numel()
            p.grad = _C.astype(flat[at:at + n].reshape(p.shape), p.dtype)
            at += n
