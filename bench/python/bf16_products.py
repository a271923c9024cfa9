"""The decoder's products in float32 and in bfloat16, as the CPU backend runs them: what
GemmChoice measured for each kernel at the product's first run (GFLOP/s), and the kernel kept.

    PYTHONPATH=build/python .venv/bin/python bench/python/bf16_products.py

bfloat16's candidates are the fixed rule (lazytrace: up to 4 rows the small bfloat16 kernel,
else the float32 widening) and the CPU's bfloat16 dot products through oneDNN (onednn;
AVX512_BF16 only)."""
import lazytrace as lt

SHAPES = [(1, 512, 2048), (2, 512, 2048), (1, 2048, 512), (16, 128, 1024), (16, 1024, 128),
          (512, 512, 2048), (512, 2048, 512), (512, 512, 512)]

for m, k, n in SHAPES:
    for dt in (lt.float32, lt.bfloat16):
        a, b, w = lt.randn(m, k).to(dt), lt.randn(k, n).to(dt), lt.randn(n, k).to(dt)
        lt.sync()
        lt.sync(a @ b)    # B row-major (NN)
        lt.sync(a @ w.t())  # x Wᵀ, a Linear's (NT)
print(lt.debug.kernel_choices())
