"""References the tests compare against: central finite differences in float64."""

import numpy as np


def numeric_grad(f, x, eps=1e-6):
    """d f(x) / d x for a scalar NumPy function f of a float64 array x, by central
    differences."""
    return numeric_grads(lambda a: f(a[0]), [x], eps)[0]


def numeric_grads(f, arrays, eps=1e-6):
    """Central differences of the scalar f(list of float64 arrays), one array per input."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + eps
            hi = f(arrays)
            a[idx] = old - eps
            lo = f(arrays)
            a[idx] = old
            g[idx] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads


def numeric_grad_at(f, arrays, which, eps=1e-6):
    """d f(*arrays) / d arrays[which] by central differences (f: a NumPy float64 scalar)."""
    return numeric_grads(lambda a: f(*a), arrays, eps)[which]
