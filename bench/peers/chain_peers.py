"""kernels_bench's two chains of 8 elementwise ops (arithmetic only; with tanh and sigmoid),
and GELU (erf's, not tanh's approximation) alone, over 4M and 44M float32 values, as one
jitted function in each peer: lazytrace (one graph, synced), JAX (jax.jit) and
torch.compile (inductor), and GELU in PyTorch eager too, on the same machine, one after the
other. Medians of --reps calls after a warm-up, in ms and in GB/s of the bytes a chain must
move (x read once, y written once); the results are checked against NumPy in float64.

Usage: PYTHONPATH=build/python .venv-peers/bin/python bench/peers/chain_peers.py [--reps N]
"""
import argparse
import math
import os
import statistics
import time

import numpy as np

import lazytrace as lt

SIZES = {"4M": 4 * 1024 * 1024, "44M": 100 * 1024 * 442}


KINDS = ("arithmetic", "with tanh, sigmoid", "gelu")


def chain(x, kind, tanh, sigmoid, relu, absolute, gelu):
    if kind == "gelu":
        return gelu(x)
    cheap = kind == "arithmetic"
    v = x * 1.5 + 0.25
    v = relu(v) if cheap else tanh(v)
    v = v * 2.0 - 0.5
    v = absolute(v) if cheap else sigmoid(v)
    v = v * x
    return v + 0.125 if cheap else relu(v)


def reference(x, kind):
    x = x.astype(np.float64)
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    erf = np.frompyfunc(math.erf, 1, 1)
    gelu = lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2)).astype(np.float64))  # noqa: E731
    return chain(x, kind, np.tanh, sigmoid, relu, np.abs, gelu)


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def lazytrace_fn(xn, kind):
    x = lt.tensor(xn)
    lt.sync([x])

    def run():
        y = chain(x, kind, lt.tanh, lt.sigmoid, lt.relu, lt.abs, lt.gelu)
        lt.sync([y])
        return y

    return run, lambda y: y.numpy()


def jax_fn(xn, kind):
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: chain(x, kind, jnp.tanh, jax.nn.sigmoid,
                                lambda v: jnp.maximum(v, 0), jnp.abs,
                                lambda v: jax.nn.gelu(v, approximate=False)))
    x = jnp.asarray(xn)
    return (lambda: f(x).block_until_ready()), np.asarray


def torch_chain(x, kind):
    import torch

    return chain(x, kind, torch.tanh, torch.sigmoid, torch.relu, torch.abs,
                 torch.nn.functional.gelu)


def torch_fn(xn, kind):
    import torch

    f = torch.compile(lambda x: torch_chain(x, kind))
    x = torch.from_numpy(xn)
    return (lambda: f(x)), lambda y: y.numpy()


def torch_eager_fn(xn, kind):
    import torch

    if kind != "gelu":
        raise ImportError  # the eager rows: GELU alone
    x = torch.from_numpy(xn)
    return (lambda: torch_chain(x, kind)), lambda y: y.numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch

        torch.set_num_threads(os.cpu_count())  # lazytrace and JAX use every core too
    except ImportError:
        pass
    print(f"{'chain':<22} {'floats':>6} {'peer':<14} {'ms':>8} {'GB/s':>7} {'max err':>9}")
    for name, n in SIZES.items():
        xn = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        for kind in KINDS:
            want = reference(xn, kind)
            for peer, make in (("lazytrace", lazytrace_fn), ("JAX jit", jax_fn),
                               ("torch.compile", torch_fn), ("torch eager", torch_eager_fn)):
                try:
                    run, to_numpy = make(xn, kind)
                except ImportError:
                    continue
                err = float(np.max(np.abs(to_numpy(run()) - want)))
                ms = median_ms(run, args.reps)
                print(f"{kind:<22} {name:>6} {peer:<14} {ms:8.2f} {8 * n / ms / 1e6:7.1f} "
                      f"{err:9.1e}", flush=True)


if __name__ == "__main__":
    main()
