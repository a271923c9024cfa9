"""erf_f32 (math.h): fits Q in e^x^2 erfc(x) = Q((x - mid) / half) on [s, 4] by Chebyshev
least squares reweighted toward minimax, printed as monomial coefficients. Usage:
erf_fit_large.py s deg (kept: 1.0 12)."""
import numpy as np
from math import erf, erfc, exp
import sys
s = float(sys.argv[1]); dq = int(sys.argv[2]); top = 4.0
mid, half = (s + top) / 2, (top - s) / 2
x = np.linspace(s, top, 40000)
fB = np.array([erfc(v) * exp(v * v) for v in x])
y = (x - mid) / half
from numpy.polynomial import chebyshev as C, polynomial as P
w = 1 / fB
for it in range(40):
    c = C.chebfit(y, fB, dq, w=w)
    err = (C.chebval(y, c) - fB) / fB
    w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
    w /= w.max()
m = C.cheb2poly(c)
err2 = (P.polyval(y, m) - fB) / fB
print("mid", mid, "half", half, "deg", dq, "max rel cheb", np.abs(err).max(), "mono", np.abs(err2).max())
print(repr(m.tolist()))
