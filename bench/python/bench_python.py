"""lazytrace driven from Python, measured in one run beside what a user would compare it with:

1. recording one op (`c = c + 1.0`) against PyTorch eager running the same op, same process;
2. the spec's tracing benchmark: the forward of a 100-layer decoder traced plainly, with
   assume_pure per layer, and with assume_pure on the whole model;
3. an AdamW training step of that decoder driven from Python (scan over stacked layers, and
   scan_layers over per-layer modules) against the same step driven from C++ (the
   `lazytrace train` command line).

Usage: bench_python.py [--layers 100] [--cli build/apps/lazytrace] [--reps 7]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import lazytrace as lt
from lazytrace.func import functional_call
from lazytrace.models import Decoder, DecoderConfig
from lazytrace.nn import functional as F

try:
    import torch
except ImportError:  # the PyTorch rows are left out
    torch = None


def median(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def per_op(n, reps):
    def lazy():
        c = lt.zeros(16)
        for _ in range(n):
            c = c + 1.0
        return c

    def hold(make):
        out = []

        def run():
            out.append(make())

        return run, out

    run, out = hold(lazy)
    t_lt = median(run, reps) / n
    out.clear()
    rows = [("lazytrace: record `c = c + 1.0`", t_lt * 1e9, "ns")]
    if torch is not None:
        torch.set_num_threads(1)

        def eager():
            c = torch.zeros(16)
            for _ in range(n):
                c = c + 1.0
            return c

        t_pt = median(eager, reps) / n
        rows.append((f"PyTorch {torch.__version__} eager: run `c = c + 1.0`", t_pt * 1e9, "ns"))
        rows.append(("ratio (PyTorch / lazytrace)", t_pt / t_lt, "x"))
    return rows


def spec_config(layers):
    return DecoderConfig(vocab=256, hidden=128, intermediate=1024, heads=8, kv_heads=4,
                         layers=layers, max_seq=8)


def median_kept(fn, reps, calls=1):
    """Median time of `calls` calls of fn, its results kept until the timing ends (dropping a
    recorded graph is not tracing it, as in the C++ assume_pure_bench)."""
    times = []
    for _ in range(reps):
        kept = []
        t0 = time.perf_counter()
        for _ in range(calls):
            kept.append(fn())
        times.append((time.perf_counter() - t0) / calls)
        del kept
    return statistics.median(times)


def tracing(layers, reps):
    cfg = spec_config(layers)
    tokens = lt.tensor(np.arange(16).reshape(2, 8) % 256)
    lt.manual_seed(0)
    plain = Decoder(cfg, layers_mode="loop")
    per_layer = Decoder(cfg, layers_mode="assume_pure")
    lt.sync()  # the weights, so the timed traces record only the forward
    whole = lt.assume_pure(lambda p, b, t: functional_call(plain, (p, b), (t,)))
    closed = lt.assume_pure(lambda t: plain(t))
    params, buffers = dict(plain.named_parameters()), dict(plain.named_buffers())
    rows = []
    for grad in (False, True):
        mode = "autograd on" if grad else "no_grad"
        with lt.set_grad_enabled(grad):
            per_layer(tokens), whole(params, buffers, tokens), closed(tokens)  # traced once
            t_plain = median_kept(lambda: plain(tokens), reps)
            t_layer = median_kept(lambda: per_layer(tokens), reps)
            t_whole = median_kept(lambda: whole(params, buffers, tokens), reps, 200)
            t_closed = median_kept(lambda: closed(tokens), reps, 200)
        rows += [
            (f"{mode}: plain tracing ({layers} layers)", t_plain * 1e3, "ms"),
            (f"{mode}: assume_pure per layer", t_layer * 1e3, "ms"),
            (f"{mode}: plain / per layer", t_plain / t_layer, "x"),
            (f"{mode}: assume_pure on the whole model, weights in a dict of {len(params)}",
             t_whole * 1e6, "us"),
            (f"{mode}: assume_pure on the whole model, weights closed over", t_closed * 1e6, "us"),
        ]
    return rows


def python_step(layers, stacked, steps, zero_grad_first=False):
    """Median step time, and the median time to record it (before the sync)."""
    cfg = spec_config(layers)
    lt.manual_seed(0)
    model = (Decoder(cfg, layers_mode="scan", stacked=True) if stacked
             else Decoder(cfg, layers_mode="scan"))
    opt = lt.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    data = lt.tensor(rng.integers(0, 256, size=(2, 9)))
    tokens, targets = data[:, :8], data[:, 1:].reshape(16)
    recorded = []

    def step():
        t0 = time.perf_counter()
        if zero_grad_first:  # torch's habit: the gradients stay live outputs of the graph
            opt.zero_grad()
        loss = F.cross_entropy(model(tokens).reshape(16, 256), targets)
        loss.backward()
        opt.step()
        # the gradients dropped before the sync, as the C++ step does: no graph output
        # needs them, so each one is computed inside its AdamW update
        if not zero_grad_first:
            opt.zero_grad()
        recorded.append(time.perf_counter() - t0)
        lt.sync()  # the step's one graph: forward, backward and the update (xm.mark_step)
        return loss.item()

    for _ in range(3):
        step()
    recorded.clear()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), statistics.median(recorded)


def cli_step(cli, layers, steps):
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [cli, "train", "--hidden", "128", "--intermediate", "1024", "--heads", "8",
             "--kv-heads", "4", "--layers", str(layers), "--batch", "2", "--seq", "8",
             "--steps", str(steps + 3), "--layers-mode", "scan", "--out",
             os.path.join(d, "w.safetensors")],
            check=True, capture_output=True, text=True).stdout
    m = re.search(r"; step ([0-9.]+) ms", out)
    return float(m.group(1)) / 1e3 if m else None


def training(layers, cli, steps, rounds=3):
    """The Python step and the C++ step alternated `rounds` times (the VM drifts): medians."""
    py, cpp, rec = [], [], []
    for _ in range(rounds):
        t, r = python_step(layers, True, steps)
        py.append(t)
        rec.append(r)
        if cli:
            cpp.append(cli_step(cli, layers, steps))
    t_stacked = statistics.median(py)
    t_first = python_step(layers, True, steps, zero_grad_first=True)[0]
    t_modules = python_step(layers, False, steps)[0]
    rows = [(f"Python, scan over stacked layers ({layers} layers), median of {rounds} runs",
             t_stacked * 1e3, "ms"),
            ("of which recording it (before the sync)", statistics.median(rec) * 1e3, "ms"),
            ("the same with zero_grad() first (gradients live at the sync)", t_first * 1e3, "ms"),
            ("Python, scan_layers over per-layer modules", t_modules * 1e3, "ms")]
    if cli:
        t_cpp = statistics.median(cpp)
        rows.append((f"C++ (lazytrace train --layers-mode scan), median of {rounds} runs",
                     t_cpp * 1e3, "ms"))
        rows.append(("Python stacked / C++", t_stacked / t_cpp, "x"))
        rows.append(("runs, Python / C++ (ms)", 0, " ".join(
            f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in zip(py, cpp))))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=100)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--cli", default=None, help="the lazytrace command line, for the C++ step")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]}, lazytrace {lt.__version__}, "
          f"{os.cpu_count()} cpus, PyTorch {'%s' % torch.__version__ if torch else 'not installed'}")
    for title, rows in (
        ("recording one op", per_op(a.ops, a.reps)),
        ("the spec's tracing benchmark (the forward)", tracing(a.layers, a.reps)),
        ("AdamW training step, spec size (batch 2, seq 8)", training(a.layers, a.cli, a.steps)),
    ):
        print(f"\n| {title} | value |\n|---|---|")
        for name, v, unit in rows:
            if unit == "x":
                print(f"| {name} | {v:.2f}x |")
            elif not v:  # a row of text
                print(f"| {name} | {unit} |")
            else:
                print(f"| {name} | {v:.3g} {unit} |")


if __name__ == "__main__":
    main()
