import statistics, time, sys
import numpy as np
import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig
cfg = DecoderConfig(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4, max_seq=256)
lt.manual_seed(0)
model = Decoder(cfg, layers_mode="scan", stacked=True)
opt = lt.optim.AdamW(model.parameters(), lr=1e-3)
rng = np.random.default_rng(2)
tokens = lt.tensor(rng.integers(0, cfg.vocab, size=(2, 257)))
x, y = tokens[:, :-1], tokens[:, 1:]
def step():
    opt.zero_grad()
    logits = model(x)
    loss = lt.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
    loss.backward(); opt.step(); lt.sync([loss])
step = lt.compile(step) if len(sys.argv) > 1 else step
for _ in range(3): step()
ts=[]
for _ in range(int(sys.argv[2]) if len(sys.argv)>2 else 10):
    t0=time.perf_counter(); step(); ts.append(time.perf_counter()-t0)
print("step median ms", statistics.median(ts)*1e3)
print(lt.debug.kernel_choices())
print(lt.metrics.short_metrics_report())
