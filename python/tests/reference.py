"""References the tests compare against: central finite differences in float64."""

import numpy as np


def numeric_grad(f, x, eps=1e-6):
    """d f(x) / d x for a scalar NumPy function f of a float64 array x, by central
    differences."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        hi = f(x)
        x[i] = old - eps
        lo = f(x)
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g
