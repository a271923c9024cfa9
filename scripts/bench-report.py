#!/usr/bin/env python3
"""Markdown tables from the Google Benchmark programs' JSON (scripts/run-bench.sh writes it).

    scripts/bench-report.py RESULTS_DIR [--before BEFORE_DIR] [--label-before L] [--label-after L]

For each program's JSON in RESULTS_DIR, one table: every benchmark's median wall time over
its repetitions and its counters (medians too). With --before, the same benchmarks from
BEFORE_DIR beside them and the ratio after / before (below 1: faster now), and each counter
that differs as "before → after". The machine and
date come from the JSON's context. docs/benchmarks.md's generated sections are this
script's output, pasted between its markers.
"""
import argparse
import json
import pathlib
import statistics
import sys

UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # to milliseconds


def load(path):
    """{benchmark name: {"ms": median wall ms, counter: median}} and the JSON's context."""
    data = json.loads(path.read_text())
    runs = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        entry = runs.setdefault(name, {"ms": [], "counters": {}})
        entry["ms"].append(b["real_time"] * UNITS[b.get("time_unit", "ns")])
        for key, value in b.items():
            if key in ("real_time", "cpu_time", "iterations", "repetitions", "repetition_index",
                       "threads", "family_index", "per_family_instance_index"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                entry["counters"].setdefault(key, []).append(value)
    out = {}
    for name, entry in runs.items():
        out[name] = {"ms": statistics.median(entry["ms"]),
                     **{k: statistics.median(v) for k, v in entry["counters"].items()}}
    return out, data.get("context", {})


def fmt(x):
    if x is None:
        return ""
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def machine(ctx):
    l3 = [c for c in ctx.get("caches", []) if c.get("level") == 3]
    cache = f", L3 {l3[0]['size'] >> 20} MiB" if l3 else ""
    return f"{ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz{cache}"


def table(name, after, before, labels, ctx):
    lines = [f"### {name}", "",
             f"{ctx.get('date', '?')[:16].replace('T', ' ')}, {machine(ctx)}. "
             "Medians over the repetitions; times in ms."]
    counters = sorted({k for r in after.values() for k in r if k != "ms"})
    head = ["benchmark"]
    if before is not None:
        head += [f"{labels[0]} ms", f"{labels[1]} ms", "after / before"]
    else:
        head += ["ms"]
    head += counters
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench, r in after.items():
        row = [f"`{bench}`"]
        if before is not None:
            b = before.get(bench)
            row += [fmt(b["ms"]) if b else "", fmt(r["ms"]),
                    f"{r['ms'] / b['ms']:.2f}" if b and b["ms"] > 0 else ""]
        else:
            row += [fmt(r["ms"])]
        b = before.get(bench) if before is not None else None
        row += [fmt(r.get(k)) if not b or k not in b or fmt(b[k]) == fmt(r.get(k))
                else f"{fmt(b[k])} → {fmt(r.get(k))}" for k in counters]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("--before", type=pathlib.Path)
    ap.add_argument("--label-before", default="before")
    ap.add_argument("--label-after", default="after")
    a = ap.parse_args()
    files = sorted(a.results.glob("*.json"))
    if not files:
        sys.exit(f"bench-report: no JSON in {a.results} (run scripts/run-bench.sh first)")
    for f in files:
        after, ctx = load(f)
        before = None
        if a.before is not None:
            bf = a.before / f.name
            before = load(bf)[0] if bf.exists() else {}
        print(table(f.stem, after, before, (a.label_before, a.label_after), ctx))


if __name__ == "__main__":
    main()
