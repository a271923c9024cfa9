#!/usr/bin/env python3
"""Two builds' `lazytrace train` steady step times, alternated, at peers_bench's sizes.

    bench/cli_step_ab.py BEFORE_CLI AFTER_CLI [--rounds N] [--size NAME]...
        [--before-flag FLAG]... [--after-flag FLAG]...

The lazytrace half of `make bench-peers` (the same decoder sizes, the scan mode with stacked
weights), for an A/B of two builds where LibTorch is not installed: each round runs every
size with the before build, then with the after build. Prints each size's median step over
the rounds and the ratio after / before (below 1: faster now). One build against itself with
a flag on one side is the A/B of that flag:

    bench/cli_step_ab.py build-bench/apps/lazytrace build-bench/apps/lazytrace \
        --after-flag=--autocast --size compute-heavy
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

SIZES = {  # name: (hidden, intermediate, heads, kv heads, layers, batch, seq, steps)
    "spec, 10 layers": (128, 1024, 4, 2, 10, 2, 8, 20),
    "spec, 100 layers": (128, 1024, 4, 2, 100, 2, 8, 10),
    "compute-heavy": (512, 2048, 8, 4, 4, 2, 256, 5),
}


def step_ms(cli, size, flags=()):
    hidden, inter, heads, kv, layers, batch, seq, steps = size
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [cli, "train", "--hidden", str(hidden), "--intermediate", str(inter), "--heads",
             str(heads), "--kv-heads", str(kv), "--layers", str(layers), "--batch", str(batch),
             "--seq", str(seq), "--steps", str(steps + 3), "--layers-mode", "scan", "--out",
             os.path.join(d, "w.safetensors"), *flags],
            check=True, capture_output=True, text=True).stdout
    m = re.search(r"; step ([0-9.]+) ms", out)
    if not m:
        raise SystemExit(f"cli_step_ab: no step time in the output of {cli}:\n{out}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", choices=sorted(SIZES), action="append",
                    help="only this size (repeatable; default: all)")
    ap.add_argument("--before-flag", action="append", default=[],
                    help="a flag for the before runs' `train` (repeatable)")
    ap.add_argument("--after-flag", action="append", default=[],
                    help="a flag for the after runs' `train` (repeatable)")
    a = ap.parse_args()
    sizes = {name: SIZES[name] for name in (a.size or SIZES)}
    times = {name: ([], []) for name in sizes}
    for r in range(a.rounds):
        for name, size in sizes.items():
            b, x = step_ms(a.before, size, a.before_flag), step_ms(a.after, size, a.after_flag)
            times[name][0].append(b)
            times[name][1].append(x)
            print(f"round {r + 1}, {name}: before {b:.2f} ms, after {x:.2f} ms", flush=True)
    print("\n| size | before step ms | after step ms | after / before | rounds (before/after) |")
    print("|---|---|---|---|---|")
    for name, (b, x) in times.items():
        mb, mx = statistics.median(b), statistics.median(x)
        pairs = ", ".join(f"{p:.1f}/{q:.1f}" for p, q in zip(b, x))
        print(f"| {name} | {mb:.2f} | {mx:.2f} | {mx / mb:.2f} | {pairs} |")


if __name__ == "__main__":
    main()
