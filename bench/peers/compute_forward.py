"""The compute-heavy forward of python_peers alone (hidden 512, intermediate 2048, 4 layers,
batch 2 x seq 256, scan_layers over stacked weights), for a profile:
PYTHONPATH=build/python perf record -D 3000 -g .venv/bin/python bench/peers/compute_forward.py
"""
import time, statistics, numpy as np
import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig
cfg = DecoderConfig(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4, max_seq=256)
lt.manual_seed(0)
m = Decoder(cfg, layers_mode="scan", stacked=True)
tok = lt.tensor(np.random.default_rng(2).integers(0, 256, size=(2, 256)))
lt.sync()
def f():
    with lt.no_grad():
        y = m(tok); lt.sync([y])
f()
ts=[]
for _ in range(60):
    t0=time.perf_counter(); f(); ts.append(time.perf_counter()-t0)
print("forward ms", statistics.median(ts)*1e3)
