"""The decoder's products in float32 and in bfloat16, as the CPU backend runs them: what
GemmChoice measured for each kernel at the product's first run (GFLOP/s), and the kernel kept.

    PYTHONPATH=build/python .venv/bin/python bench/python/bf16_products.py

bfloat16's candidates are the float32 widening (lazytrace, the fixed rule) and the CPU's
bfloat16 dot products through oneDNN (onednn; AVX512_BF16 only)."""
import lazytrace as lt

SHAPES = [(16, 128, 1024), (16, 1024, 128), (512, 512, 2048), (512, 2048, 512), (512, 512, 512)]

for m, k, n in SHAPES:
    for dt in (lt.float32, lt.bfloat16):
        a, b = lt.randn(m, k).to(dt), lt.randn(k, n).to(dt)
        lt.sync()
        lt.sync(a @ b)
print(lt.debug.kernel_choices())
