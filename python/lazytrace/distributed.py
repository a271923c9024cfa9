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

from . import _lazytrace as _C
from ._tools import no_grad

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


class DataParallel:
    """Averages (or sums) a module's gradients over the ranks, like PyTorch's
    DistributedDataParallel: all_reduce_gradients() after backward all-reduces them in
    buckets of up to bucket_cap_mb, in reverse parameter order (the order backward makes
    them), the 1/N scale folded into the reduction. Made with broadcast_parameters, every
    rank starts from rank 0's parameters and buffers."""

    def __init__(self, module, bucket_cap_mb=4, average=True, broadcast_parameters=True):
        if not bucket_cap_mb > 0:
            raise ValueError(f"[DataParallel] bucket_cap_mb must be positive, got {bucket_cap_mb}.")
        self.module = module
        self.bucket_bytes = int(bucket_cap_mb * 2**20)
        self.op = "mean" if average else "sum"
        self.buckets = []
        if broadcast_parameters:
            self.broadcast_parameters()

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def broadcast_parameters(self):
        if world_size() == 1:
            return
        with no_grad():
            for _, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
                t.copy_(broadcast(t.detach(), 0))

    def all_reduce_gradients(self):
        self.buckets = []
        if world_size() == 1:
            return
        with no_grad():
            bucket, size = [], 0
            for name, p in reversed(list(self.module.named_parameters())):
                g = p.grad
                if g is None:
                    continue
                nbytes = g.numel() * g.element_size()
                if bucket and (bucket[0][1].grad.dtype != g.dtype or size + nbytes > self.bucket_bytes):
                    self._reduce(bucket)
                    bucket, size = [], 0
                bucket.append((name, p))
                size += nbytes
            self._reduce(bucket)

    def average(self, tensor):
        """The mean over ranks of a value (e.g. the loss, for the log)."""
        return all_reduce(tensor.detach(), "mean")

    def _reduce(self, bucket):
        if not bucket:
            return
        self.buckets.append([name for name, _ in bucket])
        if len(bucket) == 1:
            p = bucket[0][1]
            p.grad = all_reduce(p.grad, self.op)
            return
        flat = all_reduce(_C.concat([p.grad.reshape(-1) for _, p in bucket], 0), self.op)
        at = 0
        for _, p in bucket:
            n = p.numel()
            p.grad = flat[at:at + n].reshape(p.shape)
            at += n
