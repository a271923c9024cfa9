"""Single rows of bench_python.py, for A/B runs of two builds alternated by hand.

Run it once per build with that build's package first on PYTHONPATH, e.g.

    for i in 1 2 3; do for b in build-a build-b; do
        PYTHONPATH=$b/python .venv-bench/bin/python bench/python/ab_rows.py forward --grad 1
    done; done

  forward [--grad 0|1] [--reps N]  best of N recordings of the 100-layer decoder's forward (ms)
  whole [--grad 0|1] [--rounds N]  best of N rounds of 200 whole-model calls, dict of weights (us)
  tracing                          the tracing table of bench_python.py alone
  per-op                           the recording-one-op table of bench_python.py alone
(bench/python/op_loop.py is the loop of recorded ops that callgrind counts.)
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import lazytrace as lt  # noqa: E402
from lazytrace.func import functional_call  # noqa: E402
from lazytrace.models import Decoder  # noqa: E402


def decoder():
    import bench_python as b

    tokens = lt.tensor(np.arange(16).reshape(2, 8) % 256)
    lt.manual_seed(0)
    model = Decoder(b.spec_config(100), layers_mode="loop")
    lt.sync()  # the weights, so the timed recordings hold only the forward
    return model, tokens


def forward(grad, reps):
    model, tokens = decoder()
    best = float("inf")
    with lt.set_grad_enabled(grad):
        for _ in range(reps):
            t0 = time.perf_counter()
            y = model(tokens)
            best = min(best, time.perf_counter() - t0)
            del y
    print(f"forward, grad={int(grad)}: best of {reps}: {best * 1e3:.3f} ms")


def whole(grad, rounds, calls=200):
    model, tokens = decoder()
    call = lt.assume_pure(lambda p, b, t: functional_call(model, (p, b), (t,)))
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    best = float("inf")
    with lt.set_grad_enabled(grad):
        call(params, buffers, tokens)  # traced once
        for _ in range(rounds):
            kept = []
            t0 = time.perf_counter()
            for _ in range(calls):
                kept.append(call(params, buffers, tokens))
            best = min(best, (time.perf_counter() - t0) / calls)
            del kept
    print(f"whole-model call, dict of {len(params)}, grad={int(grad)}: "
          f"best of {rounds} x {calls}: {best * 1e6:.2f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row", choices=["forward", "whole", "tracing", "per-op"])
    ap.add_argument("--grad", type=int, default=1)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    if a.row == "forward":
        forward(bool(a.grad), a.reps)
    elif a.row == "whole":
        whole(bool(a.grad), a.rounds)
    else:
        import bench_python as b

        rows = b.tracing(100, 7) if a.row == "tracing" else b.per_op(100_000, 7)
        for name, v, unit in rows:
            print(f"{name}: {v:.4g} {unit}")


if __name__ == "__main__":
    main()
