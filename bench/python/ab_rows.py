"""Single rows of bench_python.py, for A/B runs of two builds alternated by hand.

Run it once per build with that build's package first on PYTHONPATH, e.g.

    for i in 1 2 3; do for b in build-a build-b; do
        PYTHONPATH=$b/python .venv-bench/bin/python bench/python/ab_rows.py forward --grad 1
    done; done

  forward [--grad 0|1] [--reps N] [--mode loop|scan]  best of N recordings of the 100-layer
                                   decoder's forward, layers as a loop or scan_layers (ms)
  whole [--grad 0|1] [--rounds N]  best of N rounds of 200 whole-model calls, dict of weights (us)
  step [--layers L] [--mode loop|scan] [--reps N]  median training step, spec size (ms)
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


def decoder(mode="loop"):
    import bench_python as b

    tokens = lt.tensor(np.arange(16).reshape(2, 8) % 256)
    lt.manual_seed(0)
    model = Decoder(b.spec_config(100), layers_mode=mode)  # per-layer weights
    lt.sync()  # the weights, so the timed recordings hold only the forward
    return model, tokens


def forward(grad, reps, mode):
    model, tokens = decoder(mode)
    best = float("inf")
    with lt.set_grad_enabled(grad):
        for _ in range(reps):
            t0 = time.perf_counter()
            y = model(tokens)
            best = min(best, time.perf_counter() - t0)
            del y
    print(f"forward, {mode}, grad={int(grad)}: best of {reps}: {best * 1e3:.3f} ms")


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


def step(layers, mode, reps):
    """python_peers.py's lazytrace step (forward, cross-entropy, backward, AdamW, zero_grad,
    sync) at the spec's size, the layers unrolled (loop) or stacked and scanned (scan)."""
    from lazytrace.models import DecoderConfig
    from lazytrace.nn import functional as F

    cfg = DecoderConfig(vocab=256, hidden=128, intermediate=1024, heads=4, kv_heads=2,
                        layers=layers, max_seq=8)
    lt.manual_seed(0)
    model = Decoder(cfg, layers_mode=mode, stacked=mode == "scan")
    lt.sync()
    rng = np.random.default_rng(0)
    tok, tgt = lt.tensor(rng.integers(0, 256, (2, 8))), lt.tensor(rng.integers(0, 256, (16,)))
    opt = lt.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-8)

    def once():
        loss = F.cross_entropy(model(tok).reshape(-1, 256), tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lt.sync()

    once()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    print(f"training step, {layers} layers, {mode}: median of {reps}: "
          f"{sorted(times)[reps // 2] * 1e3:.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row", choices=["forward", "whole", "step", "tracing", "per-op"])
    ap.add_argument("--grad", type=int, default=1)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--mode", choices=["loop", "scan"], default="loop")
    a = ap.parse_args()
    if a.row == "forward":
        forward(bool(a.grad), a.reps, a.mode)
    elif a.row == "whole":
        whole(bool(a.grad), a.rounds)
    elif a.row == "step":
        step(a.layers, a.mode, a.reps)
    else:
        import bench_python as b

        rows = b.tracing(100, 7) if a.row == "tracing" else b.per_op(100_000, 7)
        for name, v, unit in rows:
            print(f"{name}: {v:.4g} {unit}")


if __name__ == "__main__":
    main()
