"""A training step of the compute-heavy decoder (hidden 512, intermediate 2048, 4 layers,
batch 2 x seq 256, scan_layers, AdamW) run eagerly and synced only by reading its loss, as a
PyTorch loop that prints loss.item() does, against the same step under lt.compile:

    PYTHONPATH=build/python .venv/bin/python bench/python/loss_only_step.py [--steps N]
"""

import argparse
import statistics
import time

import numpy as np

import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig


def step_times(compiled, steps):
    cfg = DecoderConfig(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4, max_seq=256)
    lt.manual_seed(0)
    model = Decoder(cfg, layers_mode="scan", stacked=True)
    opt = lt.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = lt.tensor(np.random.default_rng(2).integers(0, cfg.vocab, size=(2, 257)))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad()
        loss = lt.nn.functional.cross_entropy(model(x).reshape(-1, cfg.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    step = lt.compile(step) if compiled else step
    for _ in range(3):
        step().item()
    lt.metrics.clear_counters()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step().item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, lt.metrics.counter_value("CacheMiss") or 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    for compiled in (False, True):
        ms, misses = step_times(compiled, args.steps)
        name = "lt.compile" if compiled else "eager, loss.item() only"
        print(f"{name}: step median {ms:.1f} ms of {args.steps}, {misses} cache misses")


if __name__ == "__main__":
    main()
