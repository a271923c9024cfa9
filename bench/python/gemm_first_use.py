"""What measuring a product's kernels costs at its first run: the first lt.matmul of each of six
decoder products minus its second (cached) run, summed, in a fresh process. Run it with two
builds' Python modules alternately for an A/B of the choice's timing:

    PYTHONPATH=build/python .venv/bin/python bench/python/gemm_first_use.py
"""

import time

import lazytrace as lt

# m, k, n, A stored transposed, B stored transposed: a decoder's forward, input- and
# weight-gradient products at hidden 128 / 512 and intermediate 1024 / 2048
SHAPES = [
    (512, 2048, 512, False, False),
    (2048, 64, 512, True, False),
    (64, 512, 2048, False, True),
    (16, 128, 1024, False, False),
    (512, 512, 2048, True, False),
    (256, 1024, 128, False, True),
]


def main():
    total = 0.0
    for m, k, n, ta, tb in SHAPES:
        a = lt.randn([k, m] if ta else [m, k])
        b = lt.randn([n, k] if tb else [k, n])
        lt.sync([a, b])
        x = lt.transpose(a, 0, 1) if ta else a
        y = lt.transpose(b, 0, 1) if tb else b
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            c = lt.matmul(x, y)
            lt.sync([c])
            times.append(time.perf_counter() - t0)
        total += times[0] - times[1]
        print(f"{m} x {k} @ {k} x {n}: first run {1e3 * times[0]:.1f} ms, second {1e3 * times[1]:.2f} ms")
    print(f"measuring, all six products: {1e3 * total:.0f} ms")


if __name__ == "__main__":
    main()
