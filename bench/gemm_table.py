#!/usr/bin/env python3
"""gemm_bench's JSON (--benchmark_out) as a Markdown table: GFLOP/s per product and row,
lazytrace's against the best library's, and the worst and geometric-mean ratios. BM_Paired's
rows, where the JSON has them, make a table of their own: each library's time against
lazytrace's, side by side in rounds (the medians over rounds). Given several JSON files (one
process each), every figure is the median of the processes' own: a process's speed moves as a
whole on a shared virtual machine (a library's threads up to 1.5x from one process to the
next), which rounds within one process cannot average out.

Usage: bench/gemm_table.py BUILD/bench-results/gemm_bench.json [MORE.json ...]
"""
import json
import math
import re
import statistics
import sys

ROWS = ["Lazytrace", "LazytraceFixedRule", "OpenBLAS", "oneDNN", "libxsmm"]
LIBS = ["OpenBLAS", "oneDNN", "libxsmm"]
PRODUCTS = ["up x Wᵀ", "down x Wᵀ", "up dY W", "down dY W", "up dYᵀ X", "down dYᵀ X"]


def shape_of(tokens, hidden, inter, product):
    m, k, n = [(tokens, hidden, inter), (tokens, inter, hidden), (tokens, inter, hidden),
               (tokens, hidden, inter), (inter, tokens, hidden), (hidden, tokens, inter)][product]
    return f"{m} x {k} @ {k} x {n}"


def summary(label, ratios):
    good = [r for r in ratios if r == r]
    if good:
        geo = math.exp(sum(math.log(r) for r in good) / len(good))
        print(f"\n{label}: worst {min(good):.2f}, geometric mean {geo:.2f}, "
              f"{sum(r >= 0.9 for r in good)} of {len(good)} shapes at 0.9 or above.")


def table(columns, rows, cells_and_ratio, label):
    """One row per shape: `cells_and_ratio(row)` gives its cells (strings) and its ratio."""
    print("| hidden, inter | product | shape | " + " | ".join(columns) +
          " | lazytrace / best library |")
    print("|---" * (len(columns) + 4) + "|")
    ratios = []
    for args in sorted(rows, key=lambda a: (a[1], a[3], a[0])):
        cells, ratio = cells_and_ratio(rows[args])
        ratios.append(ratio)
        _, hidden, inter, product = args
        print(f"| {hidden}, {inter} | {PRODUCTS[product]} | {shape_of(*args)} | "
              f"{' | '.join(cells)} | {ratio:.2f} |")
    summary(label, ratios)


def paired_cells(runs):
    """`runs`: the shape's BM_Paired counters, one per process. Its ratio: the median of the
    processes' own (each process's best library against lazytrace), which is never above
    the best of the libraries' medians."""
    vs = [statistics.median(r[k] for r in runs)
          for k in ("vs_openblas", "vs_onednn", "vs_libxsmm")]
    rounds = sum(r["rounds"] for r in runs)
    cells = [f"{len(runs)} x {rounds / len(runs):.0f}" if len(runs) > 1 else f"{rounds:.0f}"]
    return cells + [f"{v:.2f}" for v in vs], statistics.median(r["vs_best"] for r in runs)


def row_cells(runs):
    row = {r: statistics.median(run[r] for run in runs if r in run)
           for r in ROWS if any(r in run for run in runs)}
    best = max(row.get(lib, 0) for lib in LIBS)
    ratio = row.get("Lazytrace", 0) / best if best else float("nan")
    return [f"{row[r]:.1f}" if r in row else "—" for r in ROWS], ratio


def main(paths):
    # (args) -> file -> row -> median GFLOP/s, and (args) -> file -> BM_Paired's counters (its
    # last entry: the median, where the file has repetitions)
    gflops, paired = {}, {}
    for i, path in enumerate(paths):
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            m = re.match(r"BM_(\w+)/tokens:(\d+)/hidden:(\d+)/inter:(\d+)/product:(\d+)",
                         b["name"])
            if not m:
                continue
            args = tuple(int(x) for x in m.groups()[1:])
            if m.group(1) == "Paired" and "vs_best" in b:
                paired.setdefault(args, {})[i] = b
            elif "GFLOPS" in b:
                gflops.setdefault(args, {}).setdefault(i, {})[m.group(1)] = b["GFLOPS"]
    if paired:
        print("Side by side (BM_Paired): each library's time per call against lazytrace's in the "
              "same round, the median over rounds (above 1: lazytrace faster)"
              + (f"; the median of {len(paths)} processes' medians" if len(paths) > 1 else "")
              + ".\n")
        first = "processes x rounds" if len(paths) > 1 else "rounds"
        table([first, "vs OpenBLAS", "vs oneDNN", "vs libxsmm"],
              {args: list(runs.values()) for args, runs in paired.items()}, paired_cells,
              "side by side, lazytrace / best library")
    if gflops:
        if paired:
            print("\nThe rows (GFLOP/s, medians" + (" of the processes'" if len(paths) > 1 else "")
                  + "):\n")
        table(["lazytrace", "fixed rule", "OpenBLAS", "oneDNN", "libxsmm"],
              {args: list(runs.values()) for args, runs in gflops.items()}, row_cells,
              "lazytrace / best library")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
