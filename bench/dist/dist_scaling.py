#!/usr/bin/env python3
"""Data-parallel scaling of `lazytrace train` at the compute-heavy size (hidden 512,
intermediate 2048, 4 layers, sequence 256): one rank with 1 and with 2 threads; two
processes of one thread on half the batch each that never communicate (what 2 x 1 would
take if its collectives cost nothing); and 2 MPI ranks of one thread each (4 MiB and 25 MiB
gradient buckets, the gradients reduced in bfloat16, ZeRO-1, and the all-reduces as
MPI_Allreduce instead of lt::dist's pairwise exchange: LAZYTRACE_MPI_ALL_REDUCE=mpi), each
as the default has it (collectives overlap the computation only where the ranks' threads
leave a CPU free: on 2 they do not) and with the overlap forced on
(LAZYTRACE_MPI_OVERLAP=on: collectives started early, on a thread of their own); the
default exchange also with the overlap forced off, which the default is on 2
CPUs. The rows run alternately, so that the machine's swings fall on every row alike.
Prints a markdown table: median step time, tokens/s of the global batch, each run's
throughput against the run of one rank of two threads in the same round, time in collectives
per step and its share, the part of it the step's thread waited for (what overlap did not
hide), MB each rank hands to collectives per step, and each row's throughput against one
rank of one thread.

Usage: dist_scaling.py [--cli build/apps/lazytrace] [--reps 5] [--steps 20] [--batch 4]
                       [--rows "2 ranks x 1 thread; 2 ranks x 1 thread, ZeRO-1"]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

STEP = re.compile(r"step ([\d.]+) ms \(([\d.]+) tokens/s\)")
REDUCE = re.compile(r"collectives ([\d.]+) ms/step \(([\d.]+)% of the step\), the step waited "
                    r"([\d.]+) ms/step for them; ([\d.]+) MB/step")


def run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dist_scaling: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    step = STEP.search(out.stdout)
    if not step:
        sys.exit(f"dist_scaling: no step time in the output of {' '.join(cmd)}:\n{out.stdout}")
    reduce = REDUCE.search(out.stdout)
    return (float(step.group(1)), float(step.group(2)),
            tuple(float(g) for g in reduce.groups()) if reduce else None)


def run_pair(cmd, env):
    """Two processes at once, each on half the batch, with no communication: the bound that
    2 ranks x 1 thread approach (the slower process's step)."""
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate() for p in procs]
    slowest = (0.0, 0.0)  # (ms, tokens/s of one process)
    for p, (out, err) in zip(procs, outs):
        step = STEP.search(out)
        if p.returncode != 0 or not step:
            sys.exit(f"dist_scaling: {' '.join(cmd)} failed:\n{out}\n{err}")
        slowest = max(slowest, (float(step.group(1)), float(step.group(2))))
    return slowest[0], 2 * slowest[1], None  # both halves of the batch a step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cli", default="build/apps/lazytrace")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4, help="the global batch (sequences)")
    ap.add_argument("--rows", default="",
                    help="only these rows, by their names separated by ';' (and the first two,\n"
                         "which the ratios need)")
    a = ap.parse_args()
    if a.batch < 2 or a.batch % 2:
        sys.exit("dist_scaling: --batch must be even (2 ranks, and 2 processes on half each)")
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("dist_scaling: mpirun not found (scripts/install-deps.sh installs Open MPI)")
    def train_on(batch):
        return [a.cli, "train", "--hidden", "512", "--intermediate", "2048", "--heads", "8",
                "--kv-heads", "4", "--layers", "4", "--seq", "256", "--batch", str(batch),
                "--steps", str(a.steps), "--log-every", str(10 ** 6), "--out", os.devnull]
    train = train_on(a.batch)
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI refuses root without these two; this process only
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpi = [mpirun, "-np", "2", "--oversubscribe", "-x", "LAZYTRACE_NUM_THREADS=1"]
    overlap = mpi + ["-x", "LAZYTRACE_MPI_OVERLAP=on"]
    no_overlap = mpi + ["-x", "LAZYTRACE_MPI_OVERLAP=off"]
    own = ["-x", "LAZYTRACE_MPI_ALL_REDUCE=mpi"]  # MPI_Allreduce, not the pairwise exchange
    rows = [
        ("1 rank x 1 thread", train, {"LAZYTRACE_NUM_THREADS": "1"}),
        ("1 rank x 2 threads", train, {"LAZYTRACE_NUM_THREADS": "2"}),
        ("2 processes x 1 thread, half the batch each, no communication", train_on(a.batch // 2),
         {"LAZYTRACE_NUM_THREADS": "1"}),
        ("2 ranks x 1 thread", mpi + train, {}),
        ("2 ranks x 1 thread, overlap on", overlap + train, {}),
        ("2 ranks x 1 thread, overlap off", no_overlap + train, {}),
        ("2 ranks x 1 thread, MPI_Allreduce", mpi + own + train, {}),
        ("2 ranks x 1 thread, MPI_Allreduce, overlap on", overlap + own + train, {}),
        ("2 ranks x 1 thread, 25 MiB buckets", mpi + train + ["--bucket-mb", "25"], {}),
        ("2 ranks x 1 thread, gradients in bfloat16", mpi + train + ["--reduce-dtype", "bfloat16"],
         {}),
        ("2 ranks x 1 thread, gradients in bfloat16, overlap on",
         overlap + train + ["--reduce-dtype", "bfloat16"], {}),
        ("2 ranks x 1 thread, ZeRO-1", mpi + train + ["--shard-optimizer"], {}),
        ("2 ranks x 1 thread, ZeRO-1, overlap on", overlap + train + ["--shard-optimizer"], {}),
        ("2 ranks x 1 thread, ZeRO-1, gradients in bfloat16",
         mpi + train + ["--shard-optimizer", "--reduce-dtype", "bfloat16"], {}),
    ]
    if a.rows:
        names = [n.strip() for n in a.rows.split(";")]
        unknown = set(names) - {r[0] for r in rows}
        if unknown:
            sys.exit(f"dist_scaling: no row named {sorted(unknown)}; the rows: "
                     + "; ".join(r[0] for r in rows))
        rows = rows[:2] + [r for r in rows[2:] if r[0] in names]
    results = {name: [] for name, _, _ in rows}
    for rep in range(a.reps):
        for name, cmd, extra in rows:
            runner = run_pair if name.startswith("2 processes") else run
            results[name].append(runner(cmd, {**env, **extra}))
            print(f"rep {rep + 1}/{a.reps} {name}: {results[name][-1][0]:.1f} ms/step",
                  file=sys.stderr)
    base = statistics.median(r[1] for r in results[rows[0][0]])
    two = results[rows[1][0]]  # one rank of two threads, the target's yardstick
    print(f"global batch {a.batch} x 256 tokens, {a.steps} steps per run (the first not "
          f"timed), median of {a.reps} alternated runs\n")
    print("| ranks x threads | step ms | tokens/s | vs 1 x 1 | vs 1 x 2 threads, run by run | "
          "collectives ms/step | share | waited ms/step | MB/step per rank |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _, _ in rows:
        rs = results[name]
        ms = statistics.median(r[0] for r in rs)
        tps = statistics.median(r[1] for r in rs)
        red = [r[2] for r in rs if r[2]]
        cells = ["-"] * 4 if not red else [
            f"{statistics.median(x[0] for x in red):.1f}",
            f"{statistics.median(x[1] for x in red):.0f}%",
            f"{statistics.median(x[2] for x in red):.1f}",
            f"{statistics.median(x[3] for x in red):.1f}"]
        # each run against the two threads' run beside it: the rounds' swings cancel
        ratios = " ".join(f"{r[1] / t[1]:.3f}" for r, t in zip(rs, two))
        print(f"| {name} | {ms:.1f} | {tps:.0f} | {tps / base:.2f}x | {ratios} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
