"""The process's resident memory while a training step runs at many batch sizes: each size
is a program of its own in the compile cache, and what those programs hold between runs
adds up.

    PYTHONPATH=build/python .venv/bin/python bench/python/many_shapes_memory.py [SHAPES]

An MLP 1024 -> 4096 -> 1024 (8.4M parameters, AdamW) at SHAPES (default 32) batch sizes,
256 rows and 128 more each time; prints the resident set size (VmRSS) every 4 sizes."""
import sys

import lazytrace as lt


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


shapes = int(sys.argv[1]) if len(sys.argv) > 1 else 32
lt.manual_seed(0)
w1 = lt.randn(1024, 4096).requires_grad_()
w2 = lt.randn(4096, 1024).requires_grad_()
opt = lt.optim.AdamW([w1, w2], lr=1e-3)
lt.sync()
print(f"start: {rss_mb():.0f} MB")
for i, n in enumerate(range(256, 256 + 128 * shapes, 128)):
    x = lt.randn(n, 1024)
    loss = (lt.relu(x @ w1) @ w2).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    lt.sync()  # the step, weights and optimizer state included
    loss.item()
    if i % 4 == 3:
        print(f"{i + 1} batch sizes (the last {n} rows): {rss_mb():.0f} MB", flush=True)
