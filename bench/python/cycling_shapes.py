"""A training step cycling through batch sizes in random order: time and page faults a step.

    PYTHONPATH=build/python .venv/bin/python bench/python/cycling_shapes.py

An MLP 1024 -> 4096 -> 1024 with AdamW at 16 batch sizes (1024 to 4864 rows), each compiled
once, then run in a shuffled order."""
import random, time, lazytrace as lt
def minflt():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])
lt.manual_seed(0)
w1 = lt.randn(1024, 4096).requires_grad_(); w2 = lt.randn(4096, 1024).requires_grad_()
opt = lt.optim.AdamW([w1, w2], lr=1e-3); lt.sync()
sizes = list(range(1024, 5120, 256))
def step(n):
    x = lt.randn(n, 1024)
    loss = (lt.relu(x @ w1) @ w2).square().mean()
    loss.backward(); opt.step(); opt.zero_grad(); lt.sync(); loss.item()
for n in sizes: step(n)  # compile each
random.seed(1)
for p in range(2):
    order = sizes[:]; random.shuffle(order)
    f0, t0 = minflt(), time.perf_counter()
    for n in order: step(n)
    print(f"pass {p}: {(time.perf_counter() - t0) / len(order) * 1e3:.1f} ms/step, {(minflt() - f0) / len(order):.0f} faults/step")
