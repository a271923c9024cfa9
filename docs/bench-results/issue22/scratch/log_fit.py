"""log_f32 (math.h): fits P in log(1 + f) = f - f^2 / 2 + f^3 P(f) on [sqrt(1/2) - 1,\nsqrt(2) - 1], weighted to the error relative to log(1 + f), printed as float32 monomial\ncoefficients, highest degree first. Usage: log_fit.py deg (kept: 7)."""
import numpy as np, sys
from numpy.polynomial import chebyshev as C, polynomial as P
deg = int(sys.argv[1])
lo, hi = np.sqrt(0.5) - 1, np.sqrt(2) - 1
f = np.linspace(lo, hi, 200001)
f = f[np.abs(f) > 1e-6]
target = (np.log1p(f) - f + f * f / 2) / f**3   # P(f)
# weight: error of f^3 P relative to log1p(f)
wgt = np.abs(f**3 / np.log1p(f))
mid, half = (lo + hi) / 2, (hi - lo) / 2
y = (f - mid) / half
w = wgt.copy()
for it in range(60):
    c = C.chebfit(y, target, deg, w=w)
    err = (C.chebval(y, c) - target) * wgt
    w = w * (1 + 50 * np.abs(err) / np.abs(err).max()) ** 0.5
    w /= w.max()
# monomials in f directly (fit in y, convert: P(f) = sum c_k T_k((f-mid)/half))
m = C.cheb2poly(c)
# convert polynomial in y to polynomial in f
py = P.Polynomial(m)
pf = py(P.Polynomial([-mid / half, 1 / half]))
coef = pf.coef
err2 = (P.polyval(f, coef) - target) * wgt
print("deg", deg, "max rel err", np.abs(err).max(), np.abs(err2).max())
print(repr(coef[::-1].astype(np.float32).tolist()))
