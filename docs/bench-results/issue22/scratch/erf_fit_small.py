"""erf_f32 (math.h): fits P in erf(x) / x = P(x^2) on [0, s] and, as a first try, Q on [s, 4]
in x (ill-conditioned: erf_fit_large.py fits the Q kept). Usage: erf_fit_small.py s degP degQ
(kept: 1.0 6)."""
import numpy as np
from math import erf, erfc, exp, sqrt, pi
import sys
s = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
dp = int(sys.argv[2]) if len(sys.argv) > 2 else 6
dq = int(sys.argv[3]) if len(sys.argv) > 3 else 10
top = 4.0
# region A: erf(x)/x = P(x^2), x in [0, s], relative error
x = np.linspace(1e-6, s, 20000)
z = x * x
fA = np.array([erf(v) / v for v in x])
# weighted least squares on relative error, then a few IRLS steps toward minimax
V = np.vander(z, dp + 1, increasing=True)
w = 1 / fA
for it in range(30):
    c, *_ = np.linalg.lstsq(V * w[:, None], fA * w, rcond=None)
    err = (V @ c - fA) / fA
    w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
    w /= w.max()
print("A coeffs", repr(c.tolist()), "max rel", np.abs(err).max())
# region B: erfc(x) * exp(x^2) = Q(x), x in [s, top]
x = np.linspace(s, top, 20000)
fB = np.array([erfc(v) * exp(v * v) for v in x])
t = x
V = np.vander(t, dq + 1, increasing=True)
w = 1 / fB
for it in range(30):
    d, *_ = np.linalg.lstsq(V * w[:, None], fB * w, rcond=None)
    err = (V @ d - fB) / fB
    w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
    w /= w.max()
print("B coeffs", repr(d.tolist()), "max rel", np.abs(err).max())
