"""The compute-heavy forward of python_peers alone (hidden 512, intermediate 2048, 4 layers,
batch 2 x seq 256, scan_layers over stacked weights), for a profile:

    PYTHONPATH=build/python perf record -D 3000 -g .venv/bin/python bench/peers/compute_forward.py
"""

import statistics
import time

import numpy as np

import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig


def main(calls=60):
    cfg = DecoderConfig(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4, max_seq=256)
    lt.manual_seed(0)
    model = Decoder(cfg, layers_mode="scan", stacked=True)
    tokens = lt.tensor(np.random.default_rng(2).integers(0, cfg.vocab, size=(2, 256)))
    lt.sync()

    def forward():
        with lt.no_grad():
            y = model(tokens)
            lt.sync([y])

    forward()  # traced and compiled here
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        forward()
        times.append(time.perf_counter() - t0)
    print(f"forward: median {statistics.median(times) * 1e3:.2f} ms of {calls}")


if __name__ == "__main__":
    main()
