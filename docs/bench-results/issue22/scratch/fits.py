"""The polynomials of math.h's erf_f32 and log_f32, fitted in float64: Chebyshev least
squares, reweighted toward the minimax error, printed as float32 monomial coefficients
(highest degree first) with the worst weighted error. math_accuracy.cpp checks them in float32.

  fits.py erf-small DEG   P in erf(x) / x = P(x^2) on [0, 1], error relative to erf,
                          printed with 1 taken from its constant (math.h adds x exactly)
                          (kept: 6)
  fits.py erf-large DEG   Q in e^x^2 erfc(x) = Q((x - 2.5) / 1.5) on [1, 4], weighted by e^-x^2:
                          erfc's absolute error, what erf's ulps see (kept: 8; the error
                          relative to erfc needed 12)
  fits.py exp DEG         P in e^r - 1 = r + r^2 P(r) on [-ln2 / 2, ln2 / 2], error relative
                          to e^r (kept: 4, degree 6 in all; Cephes' expf has 5)
  fits.py log DEG         P in log(1 + f) = f - f^2 / 2 + f^3 P(f) on [sqrt(1/2) - 1,
                          sqrt(2) - 1], error relative to log(1 + f) (kept: 7)

Usage: .venv/bin/python docs/bench-results/issue22/scratch/fits.py erf-large 8
"""
import math
import sys

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P


def fit(x, target, weight, deg):
    """Monomial coefficients in x of a degree-deg fit of target, its weighted error minimax-ish."""
    lo, hi = x.min(), x.max()
    y = (x - (lo + hi) / 2) / ((hi - lo) / 2)
    w = weight.copy()
    for _ in range(60):
        c = C.chebfit(y, target, deg, w=w)
        err = (C.chebval(y, c) - target) * weight
        w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
        w /= w.max()
    in_y = P.Polynomial(C.cheb2poly(c))
    return in_y(P.Polynomial([-(lo + hi) / (hi - lo), 2 / (hi - lo)])).coef, np.abs(err).max()


def main():
    kind, deg = sys.argv[1], int(sys.argv[2])
    if kind == "erf-small":
        x = np.linspace(1e-6, 1.0, 20000)
        f = np.array([math.erf(v) / v for v in x])
        coef, err = fit(x * x, f, 1 / f, deg)
        coef[0] -= 1  # math.h adds the 1 exactly: erf(x) = x + x (P(x^2) - 1)
    elif kind == "erf-large":
        x = np.linspace(1.0, 4.0, 40000)
        f = np.array([math.erfc(v) * math.exp(v * v) for v in x])
        coef, err = fit((x - 2.5) / 1.5, f, np.exp(-x * x), deg)
    elif kind == "log":
        f = np.linspace(math.sqrt(0.5) - 1, math.sqrt(2) - 1, 200001)
        f = f[np.abs(f) > 1e-6]
        target = (np.log1p(f) - f + f * f / 2) / f**3
        coef, err = fit(f, target, np.abs(f**3 / np.log1p(f)), deg)
    elif kind == "exp":
        r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 200001)
        r = r[np.abs(r) > 1e-4]
        target = (np.expm1(r) - r) / (r * r)
        coef, err = fit(r, target, r * r / np.exp(r), deg)
    else:
        sys.exit(__doc__)
    print(f"{kind} degree {deg}: worst weighted error {err:.3g}")
    print(", ".join(f"{v!r}f" for v in coef[::-1].astype(np.float32).tolist()))


if __name__ == "__main__":
    main()
