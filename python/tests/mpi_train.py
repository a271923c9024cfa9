"""lazytrace.distributed over MPI, run by ctest under mpirun (python/CMakeLists.txt), each
process a rank (pytest does not collect it):

    mpirun -np N python mpi_train.py

The collectives against NumPy over every rank's values, then data-parallel training of a
small model, compiled, replicated and ZeRO-1, against one process on the whole batch (the
same weights to 1e-5). Exit status 0 when every rank's checks pass; each rank prints its
own failures."""
import sys

import numpy as np

import lazytrace as lt
import lazytrace.distributed as dist

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"rank {dist.rank()}: FAILED {what}", file=sys.stderr)


def values(r, n=6):
    # integers and halves: every order of summing them gives the same float32
    return (np.arange(n) * 0.5 + 3 * r - 2 * (np.arange(n) % 3) * r).astype(np.float32)


def collectives():
    n, r = dist.world_size(), dist.rank()
    every = np.stack([values(q) for q in range(n)])
    x = lt.tensor(values(r))
    check(np.array_equal(dist.all_reduce(x).numpy(), every.sum(0)), "all_reduce sum")
    check(np.array_equal(dist.all_reduce(x, "max").numpy(), every.max(0)), "all_reduce max")
    check(np.array_equal(dist.all_gather(x.reshape(2, 3)).numpy(), every.reshape(2 * n, 3)),
          "all_gather")
    # block r of the sum over the ranks of each rank's n blocks
    blocks = [np.concatenate([values(q * 10 + b, 1000) for b in range(n)]) for q in range(n)]
    want = np.sum(blocks, axis=0)[r * 1000:(r + 1) * 1000]
    check(np.array_equal(dist.reduce_scatter(lt.tensor(blocks[r])).numpy(), want),
          "reduce_scatter")
    check(np.array_equal(dist.broadcast(x, src=n - 1).numpy(), values(n - 1)), "broadcast")


def model():
    lt.manual_seed(5)  # the same initial weights in every process
    return lt.nn.Sequential(lt.nn.Linear(6, 16), lt.nn.Tanh(), lt.nn.Linear(16, 3))


def batch(seed, rows):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 6)).astype(np.float32), rng.integers(0, 3, rows)


def train(parallel, steps=6, rows=12, **options):
    """The weights and losses after `steps` compiled AdamW steps on the global batch."""
    m = model()
    ddp = dist.DataParallel(m, bucket_cap_mb=0.0005, **options) if parallel else None
    opt = lt.optim.AdamW(ddp.parameters() if ddp else m.parameters(), lr=0.05)

    @lt.compile
    def step(x, y):
        loss = lt.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        if ddp:
            ddp.reduce_gradients()
        opt.step()
        if ddp:
            ddp.gather_parameters()
        opt.zero_grad()
        return ddp.average(loss) if ddp else loss

    losses = []
    begin, end = dist.shard(rows) if parallel else (0, rows)
    x, y = batch(0, rows)  # one batch, so that the loss falls
    for _ in range(steps):
        losses.append(step(lt.tensor(x[begin:end]), lt.tensor(y[begin:end])).item())
    return {k: v.numpy() for k, v in m.state_dict().items()}, losses


def main():
    dist.init()
    dist.set_timeout(60)  # ranks out of step: the clear error before ctest's limit
    check(dist.launched_by_mpi() and dist.world_size() > 1, "run under mpirun with 2+ ranks")
    collectives()
    one = []  # this rank alone on the whole batch: a rank of one, as a thread
    dist.run_threads(1, lambda r: one.append(train(False)))
    weights, losses = one[0]
    for options in ({}, {"shard_optimizer": True}):
        got, got_losses = train(True, **options)
        what = "ZeRO-1" if options else "replicated"
        check(np.allclose(got_losses, losses, rtol=1e-5, atol=0), f"{what} losses {got_losses} "
              f"against one process {losses}")
        for k, v in weights.items():
            check(np.allclose(got[k], v, rtol=1e-5, atol=1e-6), f"{what} {k}")
        check(got_losses[-1] < got_losses[0], f"{what}: the loss falls")
    if dist.rank() == 0:
        print(f"{dist.world_size()} ranks: losses {losses[0]:.6f} -> {losses[-1]:.6f}, "
              f"{'failures' if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
