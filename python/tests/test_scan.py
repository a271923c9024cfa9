"""lt.scan against independent references.

The cases follow torch_xla's test/scan/test_scan.py (cumsum, tuples, tensors made inside the
body, in-place updates, aliasing, which inputs need grad, None and () as y, random numbers,
rematerialization, mixed dtypes, and the value_and_grad_partitioned cases rewritten as scans),
plus what the spec and PYTHON.md promise beyond torch_xla: reverse, is_fn_pure reuse,
closures that get gradients, integer and bool carries, and errors that name the part at fault.

Values are checked against the same body run in NumPy float64 over a Python loop; gradients
against central finite differences of that NumPy loop.
"""

import re

import numpy as np
import pytest

import lazytrace as lt
from reference import numeric_grads
from lazytrace.experimental.scan import scan

# ----------------------------------------------------------------------------------------------
# references


class NP:
    """The ops the bodies below use, over NumPy float64 arrays (lazytrace's names)."""

    sin = staticmethod(np.sin)
    cos = staticmethod(np.cos)
    tanh = staticmethod(np.tanh)
    exp = staticmethod(np.exp)
    sum = staticmethod(np.sum)

    @staticmethod
    def sigmoid(a):
        return 1.0 / (1.0 + np.exp(-a))

    @staticmethod
    def tensor(data, dtype=None):
        return np.array(data, dtype=np.float64)


def _map(f, *trees):
    """tree_map over dict / tuple / list / None nodes, any other object a leaf."""
    t = trees[0]
    if isinstance(t, dict):
        return {k: _map(f, *[u[k] for u in trees]) for k in t}
    if isinstance(t, (tuple, list)):
        return type(t)(_map(f, *parts) for parts in zip(*trees))
    if t is None:
        return None
    return f(*trees)


def _leaves(tree):
    out = []
    _map(out.append, tree)
    return out


def _unflatten_like(tree, leaves):
    it = iter(leaves)
    return _map(lambda _: next(it), tree)


def np_scan(fn, init, xs, reverse=False):
    """scan as a plain Python loop over NumPy pytrees (the reference)."""
    n = len(_leaves(xs)[0])
    carry, ys = init, [None] * n
    order = range(n - 1, -1, -1) if reverse else range(n)
    for i in order:
        carry, ys[i] = fn(carry, _map(lambda a: a[i], xs))
    if n == 0:
        return carry, None
    return carry, _map(lambda *ys_i: np.stack(ys_i), *ys)


def lt_loopy_scan(fn, init, xs):
    """scan as a plain Python loop over lazytrace ops (the other reference)."""
    n = len(_leaves(xs)[0])
    carry, ys = init, []
    for i in range(n):
        carry, y = fn(carry, _map(lambda t: t[i], xs))
        ys.append(y)
    return carry, _map(lambda *parts: lt.stack(list(parts)), *ys)


def T(a, requires_grad=False, dtype=lt.float32):
    return lt.tensor(np.asarray(a, dtype=np.float64), dtype=dtype, requires_grad=requires_grad)


def host(t):
    return t.detach().float().numpy().astype(np.float64) if t.dtype in (
        lt.float16, lt.bfloat16) else np.asarray(t.detach().numpy())


def assert_tree_close(actual, expected, rtol=1e-5, atol=1e-6, path="tree"):
    """Same structure (dict keys in order, tuple/list kinds, None where None) and close leaves."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict, got {type(actual).__name__}"
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_tree_close(actual[k], expected[k], rtol, atol, f"{path}[{k!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_close(a, e, rtol, atol, f"{path}[{i}]")
    elif expected is None:
        assert actual is None, f"{path}: expected None, got {actual!r}"
    else:
        assert isinstance(actual, lt.Tensor), f"{path}: expected a Tensor, got {type(actual).__name__}"
        expected = np.asarray(expected)
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        np.testing.assert_allclose(host(actual), expected, rtol=rtol, atol=atol, err_msg=path)


def _np_total(tree):
    return sum(float(np.sum(a)) for a in _leaves(tree))


def _lt_total(tree):
    total = None
    for leaf in _leaves(tree):
        if leaf.dtype in (lt.int32, lt.int64, lt.bool):
            continue
        s = leaf.float().sum()
        total = s if total is None else total + s
    return total


def check_scan(body_of, init, xs, grad_init=True, grad_xs=True, reverse=False, remat="save",
               rtol=1e-5, atol=1e-6, grtol=1e-3, gatol=1e-4):
    """Scans body_of(lt) over lazytrace copies of the NumPy pytrees init and xs; checks the
    carry and ys against body_of(NP) looped in float64, and the gradients of
    sum(all carry and ys leaves) against finite differences of that loop."""
    init_t = _map(lambda a: T(a, grad_init), init)
    xs_t = _map(lambda a: T(a, grad_xs), xs)
    carry, ys = scan(body_of(lt), init_t, xs_t, reverse=reverse, remat=remat)
    ref_carry, ref_ys = np_scan(body_of(NP), init, xs, reverse=reverse)
    assert_tree_close(carry, ref_carry, rtol, atol, "carry")
    assert_tree_close(ys, ref_ys, rtol, atol, "ys")

    wrt = []  # (tensor, array) for each input that requires grad
    if grad_init:
        wrt += list(zip(_leaves(init_t), _leaves(init)))
    if grad_xs:
        wrt += list(zip(_leaves(xs_t), _leaves(xs)))
    if wrt:
        _lt_total((carry, ys)).backward()

        def np_loss(arrays):
            it = iter(arrays)
            i0 = _unflatten_like(init, [next(it) for _ in _leaves(init)]) if grad_init else init
            x0 = _unflatten_like(xs, [next(it) for _ in _leaves(xs)]) if grad_xs else xs
            return _np_total(np_scan(body_of(NP), i0, x0, reverse=reverse))

        expected = numeric_grads(np_loss, [a for _, a in wrt])
        for k, ((t, _), g) in enumerate(zip(wrt, expected)):
            assert t.grad is not None, f"input {k} got no gradient"
            np.testing.assert_allclose(t.grad.numpy(), g, rtol=grtol, atol=gatol,
                                       err_msg=f"gradient of input {k}")
    for t in (_leaves(init_t) if not grad_init else []) + (_leaves(xs_t) if not grad_xs else []):
        assert t.grad is None
    return carry, ys, init_t, xs_t


def outside_body_frames(f, *args, **kwargs):
    """f(*args, **kwargs), an exception re-raised without the frames of the scan body: pytest
    prints a failing test's frames with their arguments, and printing a tensor of the body's
    trace crashes the interpreter (see test_tensor_escaping_the_body_does_not_crash)."""
    try:
        return f(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        message = f"{type(e).__name__}: {e}"
    raise AssertionError(message)


XS3x2 = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

# ----------------------------------------------------------------------------------------------
# the spec's examples


def test_spec_cumsum_example():
    def cumsum(accumulated, element):
        accumulated += element
        return accumulated, accumulated

    init = lt.tensor([0.0])
    xs = lt.tensor([1.0, 2.0, 3.0])
    lt.sync()
    final, result = scan(cumsum, init, xs)
    assert final.shape == (1,) and result.shape == (3, 1)
    assert final.tolist() == [6.0]
    assert result.tolist() == [[1.0], [3.0], [6.0]]


def test_spec_running_mean_example():
    carry = {"sum": lt.tensor([0.0]), "count": lt.tensor([0.0])}
    xs = {"values": lt.arange(1, 6, dtype=lt.float32)}

    def fn(carry_dict, x_dict):
        new_sum = carry_dict["sum"] + x_dict["values"]
        new_count = carry_dict["count"] + 1.0
        return {"sum": new_sum, "count": new_count}, new_sum / new_count

    final_carry, means = scan(fn, carry, xs)
    assert list(final_carry) == ["sum", "count"]
    assert final_carry["sum"].tolist() == [15.0]
    assert final_carry["count"].tolist() == [5.0]
    np.testing.assert_allclose(means.numpy(), [[1.0], [1.5], [2.0], [2.5], [3.0]], rtol=1e-6)


def test_experimental_path_is_lt_scan():
    assert scan is lt.scan


# ----------------------------------------------------------------------------------------------
# torch_xla's cases


def test_scan_simple_cumsum():
    def body_of(m):
        def step(carry, x):
            new_carry = carry + x
            return new_carry, new_carry
        return step

    carry, ys, init_t, xs_t = check_scan(body_of, np.zeros(2), XS3x2)
    np.testing.assert_allclose(carry.detach().numpy(), [9.0, 12.0])
    np.testing.assert_allclose(ys.detach().numpy(), np.cumsum(XS3x2, axis=0))
    # d(sum carry + sum ys)/d init = 1 + 3, d/d xs[i] = 1 + (3 - i)
    np.testing.assert_allclose(init_t.grad.numpy(), [4.0, 4.0])
    np.testing.assert_allclose(xs_t.grad.numpy(), [[4.0, 4.0], [3.0, 3.0], [2.0, 2.0]])


def test_scan_matches_lazytrace_python_loop():
    def step(carry, x):
        h = lt.tanh(carry * x + 0.5)
        return h, h * x

    rng = np.random.default_rng(3)
    init0, xs0 = rng.normal(size=(3,)), rng.normal(size=(6, 3))
    a_init, a_xs = T(init0, True), T(xs0, True)
    b_init, b_xs = T(init0, True), T(xs0, True)
    c1, y1 = scan(step, a_init, a_xs)
    c2, y2 = lt_loopy_scan(step, b_init, b_xs)
    (c1.sum() + y1.sum()).backward()
    (c2.sum() + y2.sum()).backward()
    np.testing.assert_allclose(c1.detach().numpy(), c2.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y1.detach().numpy(), y2.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a_init.grad.numpy(), b_init.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a_xs.grad.numpy(), b_xs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_fn_not_callable():
    init = lt.tensor([1.0, 1.0])
    xs = T(XS3x2)
    with pytest.raises(TypeError):
        scan(1000, init, xs)


def test_incompatible_length():
    init = lt.tensor([1.0, 1.0])
    xs_1 = T(XS3x2)
    xs_2 = T([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError) as e:
        scan(lambda a, b: (a, b), init, (xs_1, xs_2))
    msg = str(e.value)
    assert "xs[0]" in msg and "xs[1]" in msg
    assert "3" in msg and "2" in msg


def test_scan_tuples():
    def body_of(m):
        def fn(carry, x):
            carry1, carry2 = carry
            x1, x2 = x
            new_carry1 = carry1 + x1.sum()
            new_carry2 = carry2 + x2.sum()
            y1 = x1 * 2 + m.sum(new_carry1)
            y2 = x2 * 2 + m.sum(new_carry2)
            return (new_carry1, new_carry2), (y1, y2)
        return fn

    init = (np.array([0.0]), np.array([1.0, 2.0]))
    xs = (np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]))
    carry, ys, _, _ = check_scan(body_of, init, xs)
    assert isinstance(carry, tuple) and isinstance(ys, tuple)
    assert ys[0].shape == (2, 2) and ys[1].shape == (2, 3)


def test_nested_pytree_carry_and_xs():
    """dicts holding tuples and lists, a y pytree with a None inside."""

    def body_of(m):
        def fn(carry, x):
            a, (b, c) = carry["a"], carry["bc"]
            w, v = x["pair"][0], x["pair"][1]
            scale = x["scale"]
            na = m.tanh(a * w + b)
            nb = b + v * scale
            nc = [c[0] * 0.5 + m.sin(na).sum()]
            y = {"h": (na, None), "list": [nb * 2.0, nc[0] + v.sum()]}
            return {"a": na, "bc": (nb, nc)}, y
        return fn

    rng = np.random.default_rng(7)
    init = {"a": rng.normal(size=(3,)), "bc": (rng.normal(size=(3,)), [rng.normal(size=())])}
    xs = {"pair": (rng.normal(size=(4, 3)), rng.normal(size=(4, 3))), "scale": rng.normal(size=(4, 1))}
    carry, ys, _, _ = check_scan(body_of, init, xs)
    assert isinstance(carry["bc"][1], list)
    assert ys["h"][1] is None
    assert ys["list"][1].shape == (4,)


def test_create_tensors_inside_fn():
    def body_of(m):
        def fn(carry, x):
            a = m.tensor([1.0, 2.0])
            b = m.tensor([3.0, 4.0])
            return carry + a, x + b
        return fn

    carry, ys, _, _ = check_scan(body_of, np.zeros(2), XS3x2)
    assert carry.tolist() == [3.0, 6.0]


def test_create_tensors_no_transfer_to_host():
    def fn(carry, x):
        a = lt.tensor([1.0, 2.0])
        b = lt.tensor([3.0, 4.0])
        return carry + a, x + b

    init = lt.tensor([0.0, 0.0], requires_grad=True)
    xs = T(XS3x2, True)
    lt.sync()
    lt.metrics.clear_all()
    carry, ys = scan(fn, init, xs)
    lt.sync([carry, ys])
    assert lt.metrics.counter_value("TransferToHostCount") is None
    # a read does count, so the counter above could have caught a transfer
    assert ys.detach().sum().item() == 42.0
    assert (lt.metrics.counter_value("TransferToHostCount") or 0) >= 1
    assert ys.detach().tolist() == [[4.0, 6.0], [6.0, 8.0], [8.0, 10.0]]


def test_internal_in_place_mutation():
    def body_of(m):
        def fn(carry, x):
            if m is lt:
                carry = carry.clone()
                carry.add_(x)
                y = x.clone()
                y.add_(42)
            else:
                carry, y = carry + x, x + 42
            return carry, y
        return fn

    check_scan(body_of, np.zeros(2), XS3x2)


def _inplace_cumsum(accumulated, element):
    accumulated += element
    return accumulated, accumulated


def test_in_place_on_the_carry_argument_without_gradients():
    """torch_xla refuses fn(carry, x) writing into carry; lazytrace takes it as an update of
    that iteration's carry (the spec's cumsum writes `accumulated += element`), each y a
    snapshot."""

    def fn(carry, x):
        carry.mul_(x)
        carry.add_(1.0)
        return carry, carry * 2.0

    init = lt.tensor([0.5, -1.0])
    carry, ys = scan(fn, init, T(XS3x2))
    c, out = np.array([0.5, -1.0]), []
    for x in XS3x2:
        c = c * x + 1.0
        out.append(c * 2.0)
    np.testing.assert_allclose(carry.numpy(), c, rtol=1e-6)
    np.testing.assert_allclose(ys.numpy(), np.stack(out), rtol=1e-6)


@pytest.mark.parametrize("init_grad", [False, True], ids=["xs_grad", "init_and_xs_grad"])
def test_in_place_on_the_carry_argument_with_gradients(init_grad):
    """The spec's cumsum with gradients recorded: the carry argument is each iteration's
    value, not the user's init, so writing into it is no in-place write of a leaf."""
    init = lt.tensor([0.0], requires_grad=init_grad)
    xs = lt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    final, result = outside_body_frames(scan, _inplace_cumsum, init, xs)
    assert final.tolist() == [6.0]
    assert result.detach().tolist() == [[1.0], [3.0], [6.0]]
    assert init.detach().tolist() == [0.0]
    (final.sum() + result.sum()).backward()
    # d(final + sum of prefix sums)/d xs[i] = 1 + (3 - i); d/d init = 1 + 3
    np.testing.assert_allclose(xs.grad.numpy(), [4.0, 3.0, 2.0])
    if init_grad:
        np.testing.assert_allclose(init.grad.numpy(), [4.0])


def test_in_place_cumsum_in_a_plain_loop_with_gradients():
    """The reference the test above holds scan to: the same body as a Python loop."""
    acc = lt.tensor([0.0])
    xs = lt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for i in range(3):
        acc, _ = _inplace_cumsum(acc, xs[i])
    acc.sum().backward()
    assert acc.tolist() == [6.0]
    np.testing.assert_allclose(xs.grad.numpy(), [1.0, 1.0, 1.0])


_ESCAPE = """
import lazytrace as lt
leak = []
def fn(c, x):
    leak.append(c)
    return c + x, None
lt.scan(fn, lt.zeros(2), lt.ones(3, 2))
try:
    print(repr(leak[0] + 1))
    print("no error")
except Exception as e:
    print("raised", type(e).__name__)
"""


def test_tensor_escaping_the_body_does_not_crash():
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _ESCAPE], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-400:]}"
    assert "raised RuntimeError" in r.stdout or "no error" in r.stdout


def test_external_in_place_mutation_is_refused():
    weird_global = lt.tensor([0.0, 0.0])

    def step_fn(carry, x):
        new_carry = carry + x
        weird_global.add_(1.0)
        return new_carry, new_carry + weird_global

    with pytest.raises(ValueError, match="outside"):
        scan(step_fn, lt.zeros(2), lt.zeros(3, 2))
    assert weird_global.tolist() == [0.0, 0.0]


def test_output_aliases_carry():
    def body_of(m):
        return lambda carry, x: (carry, x + 1)

    carry, ys, init_t, _ = check_scan(body_of, np.zeros(2), XS3x2)
    assert carry.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(init_t.grad.numpy(), [1.0, 1.0])


def test_output_aliases_x():
    def body_of(m):
        return lambda carry, x: (carry + 1, x)

    carry, ys, _, xs_t = check_scan(body_of, np.zeros(2), XS3x2)
    assert carry.tolist() == [3.0, 3.0]
    np.testing.assert_allclose(ys.detach().numpy(), XS3x2)
    np.testing.assert_allclose(xs_t.grad.numpy(), np.ones((3, 2)))


@pytest.mark.parametrize("grad_init,grad_xs", [(True, True), (True, False), (False, True)])
def test_gradness(grad_init, grad_xs):
    def body_of(m):
        def fn(carry, x):
            new_carry = carry * x
            return new_carry, new_carry + x
        return fn

    check_scan(body_of, np.array([1.0, 1.0]), np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]),
               grad_init=grad_init, grad_xs=grad_xs)


def test_no_input_requires_grad_gives_no_grad_outputs():
    carry, ys = scan(lambda c, x: (c * x, c + x), lt.ones(2), T(XS3x2))
    assert not carry.requires_grad and not ys.requires_grad
    assert carry.tolist() == [15.0, 48.0]


def test_output_none():
    def body_of(m):
        return lambda carry, x: (m.cos(carry) + x, None)

    _, ys, _, _ = check_scan(body_of, np.array([1.0, 1.0]), np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]))
    assert ys is None


def test_output_unit():
    def body_of(m):
        return lambda carry, x: (m.cos(carry) + x, ())

    init_t, xs_t = T([1.0, 1.0], True), T([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], True)
    carry, ys = scan(body_of(lt), init_t, xs_t)
    assert ys == ()
    ref, _ = np_scan(lambda c, x: (np.cos(c) + x, None), np.array([1.0, 1.0]),
                     np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]))
    np.testing.assert_allclose(carry.detach().numpy(), ref, rtol=1e-5)
    carry.sum().backward()
    g, = numeric_grads(lambda a: np_scan(lambda c, x: (np.cos(c) + x, None), a[0],
                                         np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]))[0].sum(),
                       [np.array([1.0, 1.0])])
    np.testing.assert_allclose(init_t.grad.numpy(), g, rtol=1e-3, atol=1e-4)


def test_rand_in_fn_differs_per_iteration_and_per_call():
    def step_fn(carry, x):
        new_carry = carry + x
        return new_carry, new_carry + lt.rand(2)

    init = lt.tensor([0.0, 0.0])
    xs = lt.zeros(3, 2)
    _, ys = scan(step_fn, init, xs)
    assert ys.shape == (3, 2)
    a = ys.numpy()
    assert ((a >= 0.0) & (a < 1.0)).all()
    assert a[0, 0] != a[1, 0] and a[1, 0] != a[2, 0] and a[0, 0] != a[2, 0]
    assert a[0, 1] != a[1, 1]
    _, ys2 = scan(step_fn, init, xs)
    assert not np.array_equal(a, ys2.numpy())
    # the same body, reused through is_fn_pure, still draws new numbers
    _, p1 = scan(step_fn, init, xs, is_fn_pure=True)
    _, p2 = scan(step_fn, init, xs, is_fn_pure=True)
    assert not np.array_equal(p1.numpy(), p2.numpy())
    assert p1.numpy()[0, 0] != p1.numpy()[1, 0]


def test_rand_in_fn_is_reproducible_under_manual_seed():
    def step_fn(carry, x):
        return carry, lt.randn(4) + x

    lt.manual_seed(1234)
    _, a = scan(step_fn, lt.zeros(1), lt.zeros(5, 4))
    a = a.numpy()
    lt.manual_seed(1234)
    _, b = scan(step_fn, lt.zeros(1), lt.zeros(5, 4))
    np.testing.assert_array_equal(a, b.numpy())
    assert len(np.unique(a)) == a.size  # every draw its own number


def _sins(m):
    def fn(carry, x):
        for _ in range(10):
            carry = m.sin(carry)
        for _ in range(10):
            x = m.sin(x)
        return carry, x
    return fn


def test_rematerialization_recompute_equals_save():
    rng = np.random.default_rng(0)
    init0, xs0 = rng.normal(size=(4, 4)), rng.normal(size=(20, 4, 4))
    got = {}
    for remat in ("save", "recompute"):
        carry, ys, init_t, xs_t = check_scan(_sins, init0, xs0, remat=remat)
        got[remat] = (carry.detach().numpy(), ys.detach().numpy(), init_t.grad.numpy(), xs_t.grad.numpy())
    for a, b in zip(got["save"], got["recompute"]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_rematerialization_saves_less():
    """With "save" the forward loop hands the backward each iteration's activations; with
    "recompute" only the carries, and the backward runs the body again."""

    def forward_loop_outputs(remat):
        init = lt.randn(4, 4, requires_grad=True)
        xs = lt.randn(20, 4, 4, requires_grad=True)
        lt.sync()
        carry, ys = scan(_sins(lt), init, xs, remat=remat)
        (carry.sum() + ys.sum()).backward()
        text = lt.debug.to_text([init.grad, xs.grad])
        loops = re.findall(r"^\s*%(\d+) = loop\(", text, re.M)
        assert len(loops) == 2, text  # one forward loop, one backward loop
        fwd = loops[0]
        return len(re.findall(rf"call_result\(%{fwd},", text))

    saved, recomputed = forward_loop_outputs("save"), forward_loop_outputs("recompute")
    assert recomputed < saved
    assert recomputed <= 3  # carry, ys and the per-iteration carries


def test_remat_must_be_save_or_recompute():
    with pytest.raises(ValueError, match="remat"):
        scan(lambda c, x: (c + x, None), lt.zeros(2), lt.ones(3, 2), remat="sometimes")


def test_different_dtypes():
    init_t = T([0.0, 0.0], True, lt.float16)
    bf16_xs = T(XS3x2, True, lt.bfloat16)
    f32_xs = T(XS3x2, True, lt.float32)

    def fn(carry, x):
        bf16_value, f32_value = x
        return lt.sin(carry), (lt.sin(bf16_value), lt.sin(f32_value))

    final_carry, (bf16_ys, f32_ys) = scan(fn, init_t, (bf16_xs, f32_xs))
    assert final_carry.dtype == lt.float16
    assert bf16_ys.dtype == lt.bfloat16
    assert f32_ys.dtype == lt.float32
    np.testing.assert_allclose(host(final_carry), [0.0, 0.0])
    np.testing.assert_allclose(host(bf16_ys), np.sin(XS3x2), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(f32_ys.detach().numpy(), np.sin(XS3x2), rtol=1e-6)
    (final_carry.float().sum() + bf16_ys.float().sum() + f32_ys.sum()).backward()
    assert init_t.grad.dtype == lt.float16 and bf16_xs.grad.dtype == lt.bfloat16
    np.testing.assert_allclose(host(init_t.grad), [1.0, 1.0], rtol=1e-3)  # cos(0)^3
    np.testing.assert_allclose(host(bf16_xs.grad), np.cos(XS3x2), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(f32_xs.grad.numpy(), np.cos(XS3x2), rtol=1e-5, atol=1e-6)


def test_mixed_dtype_carry_float64_and_float32():
    def body_of(m):
        def fn(carry, x):
            a, b = carry
            if m is lt:
                na = a * x.double() + 1.0
                nb = lt.tanh(b + na.float())
            else:
                na = a * x + 1.0
                nb = np.tanh(b + na)
            return (na, nb), nb
        return fn

    init_t = (T([0.5, 0.25], True, lt.float64), T([0.1, -0.2], True, lt.float32))
    xs_t = T([[0.5, -0.5], [1.5, 0.25], [-1.0, 2.0]], True)
    (a, b), ys = scan(body_of(lt), init_t, xs_t)
    assert a.dtype == lt.float64 and b.dtype == lt.float32 and ys.dtype == lt.float32
    init0 = (np.array([0.5, 0.25]), np.array([0.1, -0.2]))
    xs0 = np.array([[0.5, -0.5], [1.5, 0.25], [-1.0, 2.0]])
    (ra, rb), rys = np_scan(body_of(NP), init0, xs0)
    np.testing.assert_allclose(a.detach().numpy(), ra, rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), rb, rtol=1e-5)
    (a.sum().float() + ys.sum()).backward()
    g = numeric_grads(lambda v: (lambda r: r[0][0].sum() + r[1].sum())(
        np_scan(body_of(NP), (v[0], v[1]), v[2])), [init0[0], init0[1], xs0])
    np.testing.assert_allclose(init_t[0].grad.numpy(), g[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(init_t[1].grad.numpy(), g[1], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(xs_t.grad.numpy(), g[2], rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------------------------
# beyond torch_xla: reverse, is_fn_pure, tracing once, closures, integer carries


def test_reverse():
    def body_of(m):
        def fn(carry, x):
            new = m.tanh(carry * 0.5 + x)
            return new, new * x
        return fn

    rng = np.random.default_rng(11)
    init0, xs0 = rng.normal(size=(3,)), rng.normal(size=(5, 3))
    carry, ys, _, _ = check_scan(body_of, init0, xs0, reverse=True)
    # ys[i] belongs to xs[i]; the last x is consumed first
    fwd_carry, fwd_ys = np_scan(body_of(NP), init0, xs0)
    assert not np.allclose(carry.detach().numpy(), fwd_carry, atol=1e-3)
    first = np.tanh(init0 * 0.5 + xs0[-1])
    np.testing.assert_allclose(ys.detach().numpy()[-1], first * xs0[-1], rtol=1e-5)


def test_reverse_cumsum_values():
    init = lt.tensor([1.0, 1.0])
    xs = T([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]])
    c, ys = scan(lambda a, b: (a + b, a + b), init, xs, reverse=True)
    assert c.tolist() == [13.0, 16.0]
    assert ys.tolist() == [[13.0, 16.0], [11.0, 13.0], [7.0, 8.0]]


def _counts():
    return (lt.metrics.counter_value("LoopTrace") or 0, lt.metrics.counter_value("LoopHit") or 0)


def test_is_fn_pure_reuses_the_trace():
    def fn(carry, x):
        new = carry * 0.5 + x
        return new, new.sum()

    lt.metrics.clear_all()
    rng = np.random.default_rng(5)
    for k in range(3):
        xs0 = rng.normal(size=(4, 2))
        c, ys = scan(fn, lt.zeros(2), T(xs0), is_fn_pure=True)
        rc, rys = np_scan(lambda a, b: (a * 0.5 + b, (a * 0.5 + b).sum()), np.zeros(2), xs0)
        np.testing.assert_allclose(c.numpy(), rc, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys.numpy(), rys, rtol=1e-5, atol=1e-6)
    assert _counts() == (1, 2)

    # another carry shape is a new signature, traced once more, then reused
    for _ in range(2):
        c, _ = scan(fn, lt.zeros(3), lt.ones(4, 3), is_fn_pure=True)
        np.testing.assert_allclose(c.numpy(), np.full(3, 1.875))
    assert _counts() == (2, 3)
    # another number of iterations: right values whether or not the trace is reused
    c, _ = scan(fn, lt.zeros(2), lt.ones(7, 2), is_fn_pure=True)
    np.testing.assert_allclose(c.numpy(), np.full(2, 2 * (1 - 0.5 ** 7)), rtol=1e-6)


def test_without_is_fn_pure_every_call_traces():
    def fn(carry, x):
        return carry + x, None

    lt.metrics.clear_all()
    for _ in range(3):
        c, _ = scan(fn, lt.zeros(2), lt.ones(4, 2))
    assert _counts() == (3, 0)
    assert c.tolist() == [4.0, 4.0]


def test_body_is_traced_once_per_call_not_per_iteration():
    calls = []

    def fn(carry, x):
        calls.append(1)
        return carry * 0.9 + x, carry

    c, ys = scan(fn, lt.zeros(2), lt.ones(25, 2))
    assert len(calls) == 1
    ref, _ = np_scan(lambda a, b: (a * 0.9 + b, a), np.zeros(2), np.ones((25, 2)))
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5)
    calls.clear()
    for _ in range(4):
        scan(fn, lt.zeros(2), lt.ones(25, 2), is_fn_pure=True)
    assert len(calls) == 1


def test_body_is_traced_once_per_call_with_gradients():
    calls = []

    def fn(carry, x):
        calls.append(1)
        return lt.tanh(carry * x), carry

    init = lt.tensor([0.5, 0.25], requires_grad=True)
    xs = lt.randn(5, 2, requires_grad=True)
    c, ys = scan(fn, init, xs)
    (c.sum() + ys.sum()).backward()
    assert init.grad is not None
    assert len(calls) == 1


def test_closure_over_outer_tensors_gets_gradients():
    w0, b0 = np.array([0.5, -0.25]), np.array([0.1, 0.2])
    init0 = np.array([1.0, 1.0])
    xs0 = np.array([[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]) * 0.3
    w, b = T(w0, True), T(b0, True)
    init_t, xs_t = T(init0, True), T(xs0, True)

    def fn(c, x):
        n = lt.sin(c * x) * w + b
        return n, n * x

    c, ys = scan(fn, init_t, xs_t)
    (c.sum() + ys.sum()).backward()

    def np_loss(v):
        ww, bb = v[2], v[3]
        carry, ys_ = np_scan(lambda c_, x_: (lambda n: (n, n * x_))(np.sin(c_ * x_) * ww + bb), v[0], v[1])
        return carry.sum() + ys_.sum()

    rc, rys = np_scan(lambda c_, x_: (lambda n: (n, n * x_))(np.sin(c_ * x_) * w0 + b0), init0, xs0)
    np.testing.assert_allclose(c.detach().numpy(), rc, rtol=1e-5)
    np.testing.assert_allclose(ys.detach().numpy(), rys, rtol=1e-5)
    g = numeric_grads(np_loss, [init0, xs0, w0, b0])
    for t, ref in zip([init_t, xs_t, w, b], g):
        np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-3, atol=1e-4)


def test_closure_is_lifted_not_frozen_under_is_fn_pure():
    w = lt.tensor([1.0, 2.0])

    def fn(c, x):
        return c + x * w, None

    c1, _ = scan(fn, lt.zeros(2), lt.ones(3, 2), is_fn_pure=True)
    assert c1.tolist() == [3.0, 6.0]
    w.copy_(lt.tensor([10.0, 20.0]))
    lt.metrics.clear_all()
    c2, _ = scan(fn, lt.zeros(2), lt.ones(3, 2), is_fn_pure=True)
    assert _counts() == (0, 1)  # the same trace, reading w's new value
    assert c2.tolist() == [30.0, 60.0]


def test_closure_gradient_under_is_fn_pure():
    w = lt.tensor([0.5, 2.0], requires_grad=True)

    def fn(c, x):
        n = c * w + x
        return n, None

    for k in range(2):
        w.grad = None
        c, _ = scan(fn, lt.ones(2), lt.ones(3, 2), is_fn_pure=True)
        c.sum().backward()
        # c = w^3 + w^2 + w + 1, dc/dw = 3 w^2 + 2 w + 1
        wv = np.array([0.5, 2.0])
        np.testing.assert_allclose(c.detach().numpy(), wv ** 3 + wv ** 2 + wv + 1, rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), 3 * wv ** 2 + 2 * wv + 1, rtol=1e-5)


def test_integer_carry():
    """torch_xla traces the carry as requiring grad, so integer carries fail there."""

    def fn(c, x):
        return c + x, c * 2

    c, ys = scan(fn, lt.tensor(0, dtype=lt.int64), lt.arange(5))
    assert c.dtype == lt.int64 and ys.dtype == lt.int64
    assert c.item() == 10
    assert ys.tolist() == [0, 0, 2, 6, 12]
    c32, ys32 = scan(fn, lt.tensor(1, dtype=lt.int32), lt.arange(1, 5, dtype=lt.int32))
    assert c32.dtype == lt.int32 and c32.item() == 11
    assert ys32.tolist() == [2, 4, 8, 14]


def test_integer_and_float_carry_with_gradients():
    x0 = np.array([1.0, 2.0, 3.0, -0.5])
    x = T(x0, True)

    def fn(c, xi):
        n, s = c
        return (n + 1, s * 0.5 + xi * n.float()), n

    (n, s), ys = scan(fn, (lt.tensor(0), lt.tensor(0.25)), x)
    assert n.dtype == lt.int64 and ys.dtype == lt.int64 and s.dtype == lt.float32
    assert n.item() == 4 and ys.tolist() == [0, 1, 2, 3]

    def np_s(xv):
        s_ = 0.25
        for i, xi in enumerate(xv):
            s_ = s_ * 0.5 + xi * i
        return s_

    assert s.item() == pytest.approx(np_s(x0), rel=1e-6)
    s.backward()
    g, = numeric_grads(lambda v: np_s(v[0]), [x0])
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-3, atol=1e-4)


def test_bool_carry():
    c, ys = scan(lambda c, x: (c | (x > 2), c), lt.tensor(False), lt.tensor([1.0, 3.0, 1.0]))
    assert c.dtype == lt.bool and c.item() is True
    assert ys.tolist() == [False, False, True]


def test_zero_iterations():
    init = lt.tensor([1.0, 2.0])
    c, ys = scan(lambda a, b: (a + b, b * 2), init, lt.zeros(0, 2))
    assert c.tolist() == [1.0, 2.0]
    assert ys.shape == (0, 2)


# ----------------------------------------------------------------------------------------------
# torch_xla's value_and_grad_partitioned cases, as scans


def test_matmul_carry():
    def body_of(m):
        def fn(carry, x):
            new_carry = carry @ x
            return new_carry, new_carry
        return fn

    init = np.array([[1.0, 2.0], [3.0, 4.0]])
    xs = np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    carry, ys, init_t, xs_t = check_scan(body_of, init, xs)
    # one iteration by hand: new = init @ x0; d/d init of sum(new) (as carry and as y)
    one_c, one_y, i1, x1 = check_scan(body_of, init, xs[:1])
    g = np.ones((2, 2)) * 2
    np.testing.assert_allclose(i1.grad.numpy(), g @ xs[0].T, rtol=1e-6)
    np.testing.assert_allclose(x1.grad.numpy()[0], init.T @ g, rtol=1e-6)


def test_dict_carry_weights_and_biases_as_xs():
    def body_of(m):
        def fn(carry, x):
            weights, biases = x["weights"], x["biases"]
            new_a = m.sin((carry["a"] @ weights) + biases)
            new_b = m.cos((carry["b"] @ weights) + biases)
            y = m.sigmoid(new_a + new_b)
            return {"a": new_a, "b": new_b}, y
        return fn

    rng = np.random.default_rng(2)
    init = {"a": rng.normal(size=(2, 3)), "b": rng.normal(size=(2, 3))}
    for n in (1, 3):
        xs = {"weights": rng.normal(size=(n, 3, 3)), "biases": rng.normal(size=(n, 2, 3))}
        carry, ys, _, _ = check_scan(body_of, init, xs)
        assert list(carry) == ["a", "b"] and ys.shape == (n, 2, 3)


def test_tree_flatten_keeps_none_positions():
    a, b, c = lt.ones(1), lt.zeros(2), lt.full((3,), 2.0)
    tree = ((a, b), (None, c), None)
    leaves, spec = lt.tree_flatten(tree)
    assert len(leaves) == 3
    assert [t.shape for t in leaves] == [(1,), (2,), (3,)]
    back = lt.tree_unflatten(spec, leaves)
    assert back[1][0] is None and back[2] is None
    assert back[0][0].tolist() == [1.0] and back[1][1].tolist() == [2.0, 2.0, 2.0]


def test_tree_unflatten_returns_the_given_leaves():
    a, b = lt.ones(1), lt.zeros(2)
    leaves, spec = lt.tree_flatten((a, [None, b]))
    back = lt.tree_unflatten(spec, leaves)
    assert back[0] is a and back[1][1] is b


# ----------------------------------------------------------------------------------------------
# errors


def test_error_carry_shape_change():
    with pytest.raises(ValueError) as e:
        scan(lambda a, b: (a[:1], None), lt.ones(2), lt.ones(3, 2))
    msg = str(e.value)
    assert "carry" in msg and "f32[2]" in msg and "f32[1]" in msg


def test_error_carry_dtype_change():
    with pytest.raises(ValueError) as e:
        scan(lambda a, b: (a.double(), None), lt.ones(2), lt.ones(3, 2))
    msg = str(e.value)
    assert "carry" in msg and "f32[2]" in msg and "f64[2]" in msg


def test_error_carry_structure_change():
    with pytest.raises(ValueError) as e:
        scan(lambda a, b: ((a, a), None), lt.ones(2), lt.ones(3, 2))
    assert "tuple of 2" in str(e.value)
    with pytest.raises(ValueError) as e:
        scan(lambda a, b: ((a[0],), None), [lt.ones(2)], lt.ones(3, 2))
    assert "list of 1" in str(e.value) and "tuple of 1" in str(e.value)


def test_error_nested_carry_names_the_component():
    init = {"p": lt.ones(2), "q": lt.ones(2)}
    with pytest.raises(ValueError) as e:
        scan(lambda c, x: ({"p": c["p"], "r": c["q"]}, None), init, lt.ones(3, 2))
    assert "'r'" in str(e.value) and "'q'" in str(e.value)
    with pytest.raises(ValueError) as e:
        scan(lambda c, x: ({"p": c["p"], "q": c["q"].sum()}, None), init, lt.ones(3, 2))
    assert "carry['q']" in str(e.value) and "f32[]" in str(e.value)
    with pytest.raises(ValueError) as e:
        scan(lambda c, x: ({"p": c["p"], "q": c["q"].int()}, None), init, lt.ones(3, 2))
    assert "carry['q']" in str(e.value) and "i32[2]" in str(e.value)
    assert "carry['p']" not in str(e.value)


@pytest.mark.parametrize("result", ["tensor", "triple", "none"])
def test_error_fn_must_return_a_pair(result):
    def fn(c, x):
        if result == "tensor":
            return c + x
        if result == "triple":
            return c + x, c, x
        return None

    with pytest.raises(ValueError, match="pair"):
        scan(fn, lt.ones(2), lt.ones(3, 2))


@pytest.mark.parametrize("xs", [(), {}, [], {"a": 3}, ("text", 1.5)])
def test_error_xs_without_tensors(xs):
    with pytest.raises(ValueError, match="no tensors"):
        scan(lambda c, x: (c, None), lt.ones(2), xs)


def test_error_xs_none():
    with pytest.raises(ValueError, match="no tensors"):
        scan(lambda c, x: (c, None), lt.ones(2), None)


def test_none_carry():
    c, ys = scan(lambda c, x: (None, x * 2), None, lt.ones(3))
    assert c is None
    assert ys.tolist() == [2.0, 2.0, 2.0]


def test_empty_carries():
    for init in ((), {}, (None, lt.zeros(()))):
        def fn(c, x, init=init):
            if isinstance(init, tuple) and init:
                return (None, c[1] + x), x * 2
            return init, x * 2

        c, ys = scan(fn, init, lt.ones(3))
        assert ys.tolist() == [2.0, 2.0, 2.0]
        if init and isinstance(init, tuple):
            assert c[0] is None and c[1].item() == 3.0
        else:
            assert c == init


def test_error_xs_scalar_leaf():
    with pytest.raises(ValueError, match="scalar"):
        scan(lambda c, x: (c, x), lt.ones(2), lt.tensor(3.0))


def test_error_non_pytree_init_names_init():
    with pytest.raises(TypeError, match="init"):
        scan(lambda c, x: (c, None), object(), lt.ones(3))


def test_error_read_inside_body():
    with pytest.raises(RuntimeError, match="reading"):
        scan(lambda c, x: (c + x.item(), None), lt.zeros(()), lt.ones(3))


# ---- gradients taken inside a loop's body (meta-learning's inner step), as in eager code
def _inner_step(c):
    v = c.detach().requires_grad_()
    g, = lt.autograd.grad((v ** 3).sum(), v)
    return c - 0.1 * g


def test_a_gradient_taken_inside_a_loop_body_is_the_eager_one():
    x = lt.tensor([1.0, 2.0], dtype=lt.float64)
    want = x.numpy()
    for _ in range(2):
        want = want - 0.1 * 3 * want ** 2
    got = [
        lt.scan(lambda c, _: (_inner_step(c), None), x, lt.zeros(2, 1))[0],
        lt.fori_loop(0, 2, lambda i, c: _inner_step(c), x),
        lt.while_loop(lambda i, c: i < 2, lambda i, c: (i + 1, _inner_step(c)),
                      (lt.tensor(0), x))[1],
    ]
    for g in got:
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
    # of a closed-over tensor that requires grad
    w = lt.tensor([0.5, 1.5], dtype=lt.float64, requires_grad=True)

    def body(c, _):
        g, = lt.autograd.grad((c * w * w).sum(), w)
        return c + g, None

    c = x.numpy()
    for _ in range(2):
        c = c + 2 * c * w.detach().numpy()
    np.testing.assert_allclose(lt.scan(body, x, lt.zeros(2, 1))[0].detach().numpy(), c,
                               rtol=1e-12)
    # the loop's own gradient around it, against the unrolled loop
    y = lt.tensor([1.0, 2.0], dtype=lt.float64, requires_grad=True)
    lt.scan(lambda c, _: (_inner_step(c) * y, None), x, lt.zeros(2, 1))[0].sum().backward()
    y2 = lt.tensor([1.0, 2.0], dtype=lt.float64, requires_grad=True)
    c = x
    for _ in range(2):
        c = _inner_step(c) * y2
    c.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), y2.grad.numpy(), rtol=1e-12)
