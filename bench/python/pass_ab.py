"""One optional pass's A/B in one process: the decoder's forward and AdamW training step with
the pass on and off, alternated round by round, so that the machine's drift falls on both.

    PYTHONPATH=build/python .venv/bin/python bench/python/pass_ab.py gemm_choice --size compute

Sizes are python_peers.py's: spec-10, spec-100 (hidden 128, intermediate 1024, batch 2 x 8)
and compute (hidden 512, intermediate 2048, 4 layers, batch 2 x 256); the layers run by
scan_layers over stacked weights. Each round times `--calls` forwards and steps per side;
a side's figure is the median over all its calls. Both sides' programs are compiled before
the first round (the pass set is part of the compile cache's key).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig
from lazytrace.nn import functional as F

SIZES = {
    "spec-10": (dict(hidden=128, intermediate=1024, heads=4, kv_heads=2, layers=10), 2, 8),
    "spec-100": (dict(hidden=128, intermediate=1024, heads=4, kv_heads=2, layers=100), 2, 8),
    "compute": (dict(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4), 2, 256),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pass_name", help="one of lazytrace.debug.pass_names()")
    ap.add_argument("--size", default="compute", choices=sorted(SIZES))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()
    if a.pass_name not in lt.debug.pass_names():
        sys.exit(f"pass_ab: no pass '{a.pass_name}'; the passes: {', '.join(lt.debug.pass_names())}")
    kw, batch, seq = SIZES[a.size]
    cfg = DecoderConfig(vocab=256, max_seq=max(seq, 16), **kw)
    lt.manual_seed(0)
    model = Decoder(cfg, layers_mode="scan", stacked=True)
    rng = np.random.default_rng(2)
    tok = lt.tensor(rng.integers(0, cfg.vocab, size=(batch, seq)))
    tgt = lt.tensor(rng.integers(0, cfg.vocab, size=(batch * seq,)))
    opt = lt.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    lt.sync()

    def forward():
        with lt.no_grad():
            lt.sync([model(tok)])

    def step():
        loss = F.cross_entropy(model(tok).reshape(-1, cfg.vocab), tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lt.sync()

    sides = {"on": [], "off": [a.pass_name]}
    times = {(side, fn): [] for side in sides for fn in ("forward", "step")}
    first = {}
    for side, off in sides.items():  # compile both sides' programs
        lt.debug.set_disabled_passes(off)
        for name, fn in (("forward", forward), ("step", step)):
            t0 = time.perf_counter()
            fn()
            first[(side, name)] = time.perf_counter() - t0
    for r in range(a.rounds):
        for side, off in (sides.items() if r % 2 == 0 else reversed(sides.items())):
            lt.debug.set_disabled_passes(off)
            for name, fn in (("forward", forward), ("step", step)):
                for _ in range(a.calls):
                    t0 = time.perf_counter()
                    fn()
                    times[(side, name)].append(time.perf_counter() - t0)
    lt.debug.set_disabled_passes([])
    print(f"{a.pass_name} A/B, size {a.size}, {a.rounds} rounds x {a.calls} calls, "
          f"{os.cpu_count()} cpus; medians in ms (first call in s)")
    print("| | pass on | pass off | off / on |")
    print("|---|---|---|---|")
    for name in ("forward", "step"):
        on = statistics.median(times[("on", name)]) * 1e3
        off = statistics.median(times[("off", name)]) * 1e3
        print(f"| {name} | {on:.2f} | {off:.2f} | {off / on:.3f} |")
    for name in ("forward", "step"):
        print(f"| first {name} (s) | {first[('on', name)]:.3f} | {first[('off', name)]:.3f} | |")


if __name__ == "__main__":
    main()
