"""erf_f32 (math.h): fits Q in e^x^2 erfc(x) = Q((x - mid) / half) on [s, 4], weighted by
e^-x^2 (erfc's absolute error, what erf's ulps see), Chebyshev least squares reweighted
toward minimax, printed as float32 monomial coefficients, highest degree first. Usage:
erf_fit_large.py s deg (kept: 1.0 8; a fit to the relative error needed degree 12)."""
import numpy as np
from math import erfc, exp
import sys
s = float(sys.argv[1]); dq = int(sys.argv[2]); top = 4.0
mid, half = (s + top) / 2, (top - s) / 2
x = np.linspace(s, top, 40000)
fB = np.array([erfc(v) * exp(v * v) for v in x])
scale = np.exp(-x * x)  # the error that matters: erfc's absolute error
y = (x - mid) / half
from numpy.polynomial import chebyshev as C, polynomial as P
w = scale.copy()
for it in range(60):
    c = C.chebfit(y, fB, dq, w=w)
    err = (C.chebval(y, c) - fB) * scale
    w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
    w /= w.max()
m = C.cheb2poly(c)
err2 = (P.polyval(y, m) - fB) * scale
print("mid", mid, "half", half, "deg", dq, "max abs erfc err", np.abs(err2).max())
print(repr(m[::-1].astype(np.float32).tolist()))
