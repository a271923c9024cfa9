# Scratch (issue 22, 2026-12-07; docs/benchmarks.md, the compute-heavy row): the compute-heavy
# training step (hidden 512, intermediate 2048, 8 heads, 4 KV heads, 4 layers, batch 2 x 256
# tokens, scan_layers) in one process: 4 untimed steps, then the median of N timed ones, and a
# digest of the product kernels it chose (lt.debug.kernel_choices, also written to
# /tmp/vx/choices_*.txt). Run four times, each its own process:
#   for i in 1 2 3 4; do PYTHONPATH=build/python .venv/bin/python choices_per_process.py 16; done
import sys, time, statistics, hashlib
import numpy as np
import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig
from lazytrace.nn import functional as F
cfg = DecoderConfig(vocab=256, hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4)
lt.manual_seed(0)
model = Decoder(cfg, layers_mode="scan", stacked=True)
opt = lt.optim.AdamW(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
tok = lt.tensor(rng.integers(0, 256, (2, 256)).astype(np.int64))
tgt = lt.tensor(rng.integers(0, 256, (2 * 256,)).astype(np.int64))
def step():
    loss = F.cross_entropy(model(tok).reshape(-1, 256), tgt)
    loss.backward(); opt.step(); opt.zero_grad(); lt.sync()
for _ in range(4): step()
ts = []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 16):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
ch = lt.debug.kernel_choices()
picks = [l.split(":")[0] + ":" + l.split(":")[1].split("(")[0].strip() for l in ch.splitlines() if l.startswith("matmul")]
print(f"median {statistics.median(ts)*1e3:.1f} ms  min {min(ts)*1e3:.1f}  choices {hashlib.md5(chr(10).join(picks).encode()).hexdigest()[:8]}")
import os; os.makedirs("/tmp/vx", exist_ok=True); open(f"/tmp/vx/choices_{int(time.time()*1000)%100000}.txt", "w").write(ch)
