"""torch ops composed of lazytrace's own (lazytrace/_composite.py): values against NumPy,
gradients against central differences in float64, and their errors."""

import numpy as np
import pytest

import lazytrace as lt

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 5))


def t64(a, grad=False):
    return lt.tensor(np.asarray(a, np.float64), requires_grad=grad)


def check_grad(f, a, eps=1e-6):
    """f(tensor) -> tensor; its gradient of sum(f(x) * w) at a against central differences."""
    w = RNG.standard_normal(np.shape(f(t64(a)).numpy()))
    x = t64(a, True)
    (f(x) * t64(w)).sum().backward()
    want = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += eps
        down[i] -= eps
        want[i] = ((f(t64(up)).numpy() * w).sum() - (f(t64(down)).numpy() * w).sum()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_split_chunk_and_unbind_match_numpy():
    x = t64(A)
    assert [p.numpy().tolist() for p in x.split(2, 1)] == [p.tolist() for p in np.split(A, [2, 4], 1)]
    assert [p.numpy().tolist() for p in lt.split(x, [1, 4], 1)] == [p.tolist() for p in np.split(A, [1], 1)]
    assert [p.shape for p in x.chunk(2, 0)] == [(2, 5), (1, 5)]
    assert [p.numpy().tolist() for p in x.unbind(1)] == [A[:, j].tolist() for j in range(5)]
    assert [p.shape for p in lt.zeros(0).split(2)] == [(0,)]
    check_grad(lambda x: lt.cat([p * (i + 1) for i, p in enumerate(x.split(2, 1))], 1), A)
    with pytest.raises(ValueError, match="add up to 5"):
        x.split([2, 2], 1)
    with pytest.raises(ValueError, match="split_size must be positive"):
        x.split(0, 1)


def test_tril_triu_eye_and_linspace_match_numpy():
    x = t64(A)
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(x.tril(k).numpy(), np.tril(A, k))
        np.testing.assert_array_equal(lt.triu(x, k).numpy(), np.triu(A, k))
    b = lt.ones(2, 3, 3, dtype=lt.bool)
    np.testing.assert_array_equal(b.tril().numpy(), np.tril(np.ones((2, 3, 3), bool)))
    np.testing.assert_array_equal(lt.eye(3, 4).numpy(), np.eye(3, 4, dtype=np.float32))
    assert lt.eye(2, dtype=lt.int64).dtype == lt.int64
    for start, end, steps in ((0, 1, 5), (-3.5, 10, 7), (2, 2, 1), (1, 0, 0), (0, 1, 1000)):
        got = lt.linspace(start, end, steps, dtype=lt.float64).numpy()
        np.testing.assert_allclose(got, np.linspace(start, end, steps), rtol=1e-15, atol=1e-15)
        if steps > 1:
            assert got[-1] == end and got[0] == start
    check_grad(lambda x: x.triu(1), A)
    with pytest.raises(ValueError, match="at least 2 dims"):
        lt.ones(3).tril()


def test_reductions_match_numpy():
    x = t64(A)
    np.testing.assert_allclose(x.logsumexp(1).numpy(), np.log(np.exp(A).sum(1)), rtol=1e-14)
    np.testing.assert_allclose(lt.logsumexp(x, (0, 1), keepdim=True).numpy(),
                               np.log(np.exp(A).sum(keepdims=True)), rtol=1e-14)
    big = lt.tensor([[1000.0, 1000.0], [-np.inf, -np.inf]])
    np.testing.assert_allclose(big.logsumexp(1).numpy(), [1000 + np.log(2), -np.inf])
    for p in (2, 1, 3, 0.5, np.inf, -np.inf, 0):
        np.testing.assert_allclose(x.norm(p, dim=1).numpy(), np.linalg.norm(A, p, axis=1),
                                   rtol=1e-13)
    np.testing.assert_allclose(x.norm().numpy(), np.linalg.norm(A), rtol=1e-14)
    np.testing.assert_allclose(x.prod(1).numpy(), A.prod(1), rtol=1e-14)
    np.testing.assert_allclose(x.prod().numpy(), A.prod(), rtol=1e-13)
    assert lt.tensor([[1, 2], [3, 4]], dtype=lt.int32).prod().dtype == lt.int64
    assert lt.zeros(2, 0).prod(1).tolist() == [1.0, 1.0]
    check_grad(lambda x: x.logsumexp(0), A)
    check_grad(lambda x: x.norm(dim=1), A)
    check_grad(lambda x: x.norm(3, dim=0), A)
    check_grad(lambda x: x.prod(1), A)
    z = t64(np.zeros(3), True)
    z.norm().backward()
    assert z.grad.tolist() == [0.0, 0.0, 0.0]  # torch's subgradient at 0, not NaN


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_cumsum_and_cumprod_match_numpy(n):
    a = RNG.standard_normal((2, n))
    np.testing.assert_allclose(t64(a).cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t64(a).cumprod(1).numpy(), np.cumprod(a, 1), rtol=1e-12,
                               atol=1e-300)
    i = lt.tensor(np.arange(n * 2).reshape(2, n), dtype=lt.int32)
    assert i.cumsum(1).dtype == lt.int64
    assert i.cumsum(0).tolist() == np.cumsum(np.arange(n * 2).reshape(2, n), 0).tolist()
    if n <= 7:
        check_grad(lambda x: x.cumsum(1), a)
        check_grad(lambda x: x.cumprod(1), a)


def test_gather_and_scatter_add_match_numpy():
    x = t64(A)
    idx = RNG.integers(0, 5, (3, 4))
    np.testing.assert_array_equal(x.gather(1, lt.tensor(idx)).numpy(),
                                  np.take_along_axis(A, idx, 1))
    idx0 = RNG.integers(0, 3, (2, 5))
    np.testing.assert_array_equal(lt.gather(x, 0, lt.tensor(idx0)).numpy(),
                                  np.take_along_axis(A, idx0, 0))
    src = RNG.standard_normal((3, 4))
    want = A.copy()
    for i in range(3):
        for j in range(4):
            want[i, idx[i, j]] += src[i, j]
    np.testing.assert_allclose(x.scatter_add(1, lt.tensor(idx), t64(src)).numpy(), want,
                               rtol=1e-15)
    check_grad(lambda x: x.gather(1, lt.tensor(idx)), A)
    check_grad(lambda s: x.detach().scatter_add(1, lt.tensor(idx), s), src)
    with pytest.raises(IndexError, match=r"\[gather\] index 5 is out of range for dim 1 of size 5"):
        x.gather(1, lt.tensor([[5], [0], [0]]))
    with pytest.raises(IndexError, match="index -1"):
        x.scatter_add(1, lt.tensor([[-1], [0], [0]]), t64([[1.0], [1.0], [1.0]]))
    pending = lt.tensor([[2], [0], [0]]) * 3  # 6: found when it runs
    with pytest.raises(ValueError, match="out of range"):
        x.gather(1, pending).numpy()
    with pytest.raises(TypeError, match="int64"):
        x.gather(1, lt.tensor([[0.0]]))
    with pytest.raises(ValueError, match="as many dims"):
        x.gather(1, lt.tensor([0]))


def test_fmod_div_rounding_and_alpha():
    a = np.array([-7, 7, -7, 7, 0])
    b = np.array([3, -3, -3, 3, 2])
    assert lt.fmod(lt.tensor(a), lt.tensor(b)).tolist() == np.fmod(a, b).tolist()
    af = RNG.standard_normal(6) * 10
    np.testing.assert_allclose(lt.fmod(t64(af), 3.0).numpy(), np.fmod(af, 3.0), rtol=1e-14)
    assert lt.div(lt.tensor(a), lt.tensor(b), rounding_mode="trunc").tolist() == \
        np.trunc(a / b).astype(int).tolist()
    assert lt.div(lt.tensor(a), lt.tensor(b), rounding_mode="floor").tolist() == (a // b).tolist()
    np.testing.assert_array_equal(lt.div(t64(af), 3.0, rounding_mode="trunc").numpy(),
                                  np.trunc(af / 3.0))
    x = t64(A)
    np.testing.assert_array_equal(lt.add(x, x, alpha=2).numpy(), A + 2 * A)
    np.testing.assert_array_equal(x.sub(1.5, alpha=2).numpy(), A - 3.0)
    with pytest.raises(ValueError, match="rounding_mode"):
        lt.div(x, 2, rounding_mode="round")


def test_composite_edge_cases():
    assert [p.shape for p in lt.zeros(0).split(0)] == [(0,)]
    t = lt.tensor([7, -7])
    assert lt.div(7, t, rounding_mode="trunc").tolist() == [1, -1]
    assert lt.fmod(lt.tensor([-5.0, 2.0]), np.inf).tolist() == np.fmod([-5.0, 2.0], np.inf).tolist()
    assert lt.fmod(lt.tensor([-5.0, 4.0]), lt.tensor([np.inf, 3.0])).tolist() == [-5.0, 1.0]
    assert lt.logsumexp(lt.zeros(2, 0), 1).tolist() == [-np.inf, -np.inf]
    assert lt.norm(lt.tensor([300.0, 400.0], dtype=lt.float16)).item() == 500.0
    with pytest.raises(TypeError, match="alpha must be an int"):
        lt.sub(t, t, alpha=0.5)
    with pytest.raises(ValueError, match="at least one dim"):
        lt.tensor(2.0).scatter_add(0, lt.tensor(0), lt.tensor(1.0))
    for f in (lambda: lt.tensor(2.0).cumsum(3), lambda: lt.tensor(2.0).prod(5)):
        with pytest.raises(ValueError, match="out of range"):
            f()
    assert lt.tensor(2.0).cumsum(0).item() == 2.0 and lt.tensor(3.0).prod(-1).item() == 3.0


def test_in_place_alpha_and_rounding_forms():
    x = lt.tensor([1.0, 2.0])
    assert x.add_(lt.ones(2), alpha=2) is x and x.tolist() == [3.0, 4.0]
    assert x.sub_(1.0, alpha=0.5).tolist() == [2.5, 3.5]
    i = lt.tensor([7, -7])
    assert i.div_(2, rounding_mode="trunc").tolist() == [3, -3] and i.dtype == lt.int64
    with pytest.raises(RuntimeError, match="can't be cast"):
        lt.tensor([7, -7]).div_(2)  # true division: a float result
    with pytest.raises(ValueError, match=r"^\[fill_\] the number"):
        lt.ones(2, dtype=lt.float16).fill_(1e6)
