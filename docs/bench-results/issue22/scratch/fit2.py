import numpy as np
from numpy.polynomial import polynomial as P
X = 9.2
x = np.concatenate([np.linspace(1e-5, 1, 6000), np.linspace(1, X, 10000)])
t = np.tanh(x)
np_, nq = 5, 5
w = np.ones_like(x)
best = None
for it in range(200):
    z = x*x
    A = np.concatenate([(x[:,None]*z[:,None]**np.arange(np_)[None,:]), (-t[:,None]*z[:,None]**np.arange(1,nq)[None,:])], axis=1)
    sw = np.sqrt(w)/t
    c, *_ = np.linalg.lstsq(A*sw[:,None], t*sw, rcond=None)
    p = c[:np_]; q = np.concatenate([[1.0], c[np_:]])
    err = np.abs(x*P.polyval(z, p)/P.polyval(z, q) - t)/t
    if best is None or err.max() < best[2]: best = (p, q, err.max())
    w = w*(err/err.max()+1e-3); w /= w.sum()
p, q, e = best
print("max rel err", e, "ulps", e/2**-24)
# normalize so that p0 = 1 exactly? keep as is; print float32 coefficients
for name, v in [("p", p), ("q", q)]:
    print(name, ", ".join("%.9ef" % np.float32(c) for c in v))
