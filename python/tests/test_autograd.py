"""Autograd with torch's semantics, against central finite differences in float64."""

import numpy as np
import pytest

import lazytrace as lt
from reference import numeric_grad


def test_leaf_grad_and_backward():
    x0 = np.array([[0.5, -1.2, 2.0], [0.3, 0.8, -0.4]])
    w0 = np.array([[1.0, -2.0], [0.5, 0.25], [-1.5, 0.75]])
    x = lt.tensor(x0, dtype=lt.float64, requires_grad=True)
    w = lt.tensor(w0, dtype=lt.float64).requires_grad_()
    assert x.is_leaf and w.requires_grad and x.grad is None
    y = lt.tanh(x @ w).sum() * 3.0
    assert not y.is_leaf and y.requires_grad
    y.backward()

    def f(xv, wv):
        return 3.0 * np.tanh(xv @ wv).sum()

    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(lambda v: f(v, w0), x0), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), numeric_grad(lambda v: f(x0, v), w0), rtol=1e-6)


def test_gradients_accumulate_and_zero():
    x = lt.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    x.grad = None
    assert x.grad is None


def test_backward_with_a_gradient():
    x = lt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(lt.tensor([1.0, 0.5, -1.0]))
    assert x.grad.tolist() == [2.0, 2.0, -6.0]


def test_composite_function_against_finite_differences():
    rng = np.random.default_rng(1)
    a0 = rng.normal(size=(4, 6))
    b0 = rng.normal(size=(6,))

    def np_f(a, b):
        h = np.maximum(a * b, 0.0) + np.sin(a)
        s = np.exp(h - h.max(-1, keepdims=True))
        p = s / s.sum(-1, keepdims=True)
        return (p * np.log(p + 1.0)).mean() + (a ** 2).sum() / (1.0 + np.abs(b).sum())

    a = lt.tensor(a0, dtype=lt.float64, requires_grad=True)
    b = lt.tensor(b0, dtype=lt.float64, requires_grad=True)
    h = lt.relu(a * b) + a.sin()
    p = lt.softmax(h, -1)
    out = (p * lt.log(p + 1.0)).mean() + (a ** 2).sum() / (1.0 + b.abs().sum())
    out.backward()
    assert out.item() == pytest.approx(np_f(a0, b0), rel=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), numeric_grad(lambda v: np_f(v, b0), a0), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(b.grad.numpy(), numeric_grad(lambda v: np_f(a0, v), b0), rtol=1e-5, atol=1e-9)


def test_indexing_is_differentiable():
    x0 = np.arange(12.0).reshape(3, 4) / 10
    x = lt.tensor(x0, dtype=lt.float64, requires_grad=True)
    (x[1:, ::2] * x[0, None, 1:3]).sum().backward()
    want = numeric_grad(lambda v: (v[1:, ::2] * v[0, None, 1:3]).sum(), x0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-9)


def test_no_grad_and_enable_grad_as_context_managers_and_decorators():
    x = lt.ones(2, requires_grad=True)
    with lt.no_grad():
        assert not lt.is_grad_enabled()
        y = x * 2
        with lt.enable_grad():
            assert lt.is_grad_enabled()
            z = x * 2
    assert lt.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad

    @lt.no_grad()
    def f(t):
        return t * 3

    assert not f(x).requires_grad
    with lt.set_grad_enabled(False):
        assert not (x * 1).requires_grad


def test_detach():
    x = lt.tensor([2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.tolist() == [2.0]


def test_autograd_grad_with_grad_outputs_and_create_graph():
    x = lt.tensor([2.0, 3.0], dtype=lt.float64, requires_grad=True)
    y = x ** 3
    (g,) = lt.autograd.grad(y, x, grad_outputs=lt.tensor([1.0, 2.0], dtype=lt.float64),
                            create_graph=True)
    assert g.tolist() == [12.0, 54.0]  # 3 x^2 * v
    (g2,) = lt.autograd.grad(g.sum(), x)
    assert g2.tolist() == [12.0, 36.0]  # 6 x * v
    assert x.grad is None


def test_backward_errors_are_runtime_errors():
    with pytest.raises(RuntimeError, match="does not require grad"):
        lt.ones(2).sum().backward()
    with pytest.raises(RuntimeError, match="one-element"):
        (lt.ones(2, requires_grad=True) * 2).backward()
    with pytest.raises(RuntimeError, match="floating"):
        lt.ones(2, dtype=lt.int64).requires_grad_()


def test_in_place_operators_keep_the_gradient_of_the_old_value():
    x0, b0 = np.array([2.0, 3.0]), np.array([5.0, 7.0])
    x = lt.tensor(x0, dtype=lt.float64, requires_grad=True)
    b = lt.tensor(b0, dtype=lt.float64, requires_grad=True)
    h = x * 1.0
    h *= b  # d/db of sum(h) is the old h, d/dx is b
    h += x
    (h * h).sum().backward()
    f = lambda xv, bv: ((xv * bv + xv) ** 2).sum()  # noqa: E731
    np.testing.assert_allclose(b.grad.numpy(), numeric_grad(lambda v: f(x0, v), b0), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(lambda v: f(v, b0), x0), rtol=1e-6)


def test_grad_mode_forms_as_torch():
    @lt.no_grad
    def bare(t):
        return t * 2

    x = lt.ones(2, requires_grad=True)
    assert not bare(x).requires_grad and lt.is_grad_enabled()
    lt.set_grad_enabled(False)
    try:
        assert not lt.is_grad_enabled() and not (x * 2).requires_grad
    finally:
        lt.set_grad_enabled(True)
    assert lt.is_grad_enabled()

    @lt.set_grad_enabled(False)
    def off(t):
        return t * 2

    assert lt.is_grad_enabled() and not off(x).requires_grad and lt.is_grad_enabled()
    with lt.no_grad():
        with lt.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not lt.is_grad_enabled()


def test_grad_mode_decorators_hold_inside_generators():
    """As torch's: the mode holds while a decorated generator's body runs, each resumption,
    and the caller's mode between them."""
    x = lt.ones(2, requires_grad=True)

    @lt.no_grad()
    def gen():
        sent = yield lt.is_grad_enabled(), (x * 2).requires_grad
        yield sent, lt.is_grad_enabled()

    g = gen()
    assert next(g) == (False, False)
    assert lt.is_grad_enabled()  # the caller's mode between resumptions
    assert g.send("hi") == ("hi", False)
    with pytest.raises(StopIteration):
        next(g)

    @lt.enable_grad()
    def counted():
        yield lt.is_grad_enabled()
        return 7

    with lt.no_grad():
        out = list(counted())
    assert out == [True]


def test_second_derivatives_through_ops_that_read_their_result():
    """exp, tanh, sigmoid and softmax read their own result in their gradient: with
    create_graph, that result keeps its history (the second derivative was 0)."""
    xs = np.array([0.3, -0.8, 1.1])
    for f, d2 in ((lt.exp, np.exp), (lt.tanh, lambda v: -2 * np.tanh(v) / np.cosh(v) ** 2),
                  (lt.sigmoid, lambda v: (s := 1 / (1 + np.exp(-v))) * (1 - s) * (1 - 2 * s))):
        x = lt.tensor(xs, dtype=lt.float64, requires_grad=True)
        (g,) = lt.autograd.grad(f(x).sum(), x, create_graph=True)
        (h,) = lt.autograd.grad(g.sum(), x)
        np.testing.assert_allclose(h.numpy(), d2(xs), rtol=1e-12)


def test_autograd_grad_arguments_as_torch():
    a = lt.tensor([1.0, 2.0], requires_grad=True)
    b = lt.tensor([3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        lt.autograd.grad((a * a).sum(), [a, b])
    ga, gb = lt.autograd.grad((a * a).sum(), [a, b], allow_unused=True)
    assert ga.tolist() == [2.0, 4.0] and gb is None
    ga, gb = lt.autograd.grad((a * a).sum(), [a, b], materialize_grads=True)
    assert gb.tolist() == [0.0]
    with pytest.raises(RuntimeError, match="grad requires non-empty inputs"):
        lt.autograd.grad((a * a).sum(), [])
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        lt.autograd.grad(a.argmax(), [a])
    (g,) = lt.autograd.grad([(a * a).sum()], [a], grad_outputs=[None])
    assert g.tolist() == [2.0, 4.0]
    y = (a * a * a).sum()
    with lt.no_grad():  # create_graph records the backward's ops even here, as torch
        (g,) = lt.autograd.grad(y, [a], create_graph=True)
    assert g.requires_grad
    (h,) = lt.autograd.grad(g.sum(), [a])
    assert h.tolist() == [6.0, 12.0]


# ---------------------------------------------------------------- autograd.Function


class _Exp(lt.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def test_function_with_its_own_backward_matches_the_derivative():
    xs = np.array([0.5, -1.0, 2.0])
    x = lt.tensor(xs, dtype=lt.float64, requires_grad=True)
    w = np.array([1.0, 2.0, -3.0])
    (_Exp.apply(x) * lt.tensor(w, dtype=lt.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xs) * w, rtol=1e-14)
    # gradients of gradients: backward's ops are recorded with create_graph
    x = lt.tensor(xs, dtype=lt.float64, requires_grad=True)
    (g,) = lt.autograd.grad(_Exp.apply(x).sum(), x, create_graph=True)
    (gg,) = lt.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), np.exp(xs), rtol=1e-14)


def test_function_outputs_non_tensor_inputs_and_setup_context():
    class SplitScale(lt.autograd.Function):  # (x * k, x.sum() as an int count, x * 2)
        @staticmethod
        def forward(x, k, note):
            return x * k, (x > 0).sum(), x * 2.0

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, ga, gcount, gb):
            assert gcount.tolist() == 0  # a non-differentiable output's gradient: zeros
            return ga * ctx.k + gb * 2.0, None, None

    x = lt.tensor([1.0, -2.0], requires_grad=True)
    a, count, b = SplitScale.apply(x, 3.0, "note")
    assert not count.requires_grad and count.tolist() == 1
    a.sum().backward(retain_graph=True)  # b unused: zeros reach backward for it
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    x.grad = None
    (a.sum() + (b * 5.0).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [13.0, 13.0])


def test_straight_through_function_inside_the_tools_matches_eager():
    class Round(lt.autograd.Function):  # the straight-through estimator
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        @lt.autograd.once_differentiable
        def backward(ctx, g):
            return g

    xs = np.array([[0.3, 1.7], [-2.2, 0.9], [1.1, -0.4]], np.float32)
    w = lt.tensor([1.5, -2.0], requires_grad=True)

    def loss(x):
        return (Round.apply(x * w) * x).sum()

    for tool in (lambda f: f, lt.assume_pure, lt.compile):
        w.grad = None
        if tool is lt.compile:
            def step(x):
                loss(x).backward()
                return w.grad
            g = tool(step)(lt.tensor(xs)).detach().numpy()
        else:
            tool(loss)(lt.tensor(xs)).backward()
            g = w.grad.numpy()
        np.testing.assert_allclose(g, (xs * xs).sum(0), rtol=1e-6)
    # in a scan body, over the rows
    w.grad = None
    carry, _ = lt.scan(lambda c, x: (c + loss(x), None), lt.zeros(()), lt.tensor(xs))
    carry.backward()
    np.testing.assert_allclose(w.grad.numpy(), (xs * xs).sum(0), rtol=1e-6)


def test_function_mistakes_are_errors():
    class WrongCount(lt.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(lt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return g

    x = lt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[WrongCount\] backward returned 1 gradients for "
                                           r"the 2 inputs of forward"):
        WrongCount.apply(x, x).sum().backward()
    with pytest.raises(ValueError, match=r"\[WrongShapeBackward\] backward's gradient 0 has shape "
                                         r"\[\] but input 0 has shape \[2\]"):
        WrongShape.apply(x).backward()
    with pytest.raises(RuntimeError, match=r"a Function is not instantiated"):
        WrongShape()
    with pytest.raises(TypeError, match=r"save_for_backward\] argument 0 is a int"):
        lt.autograd.FunctionCtx().save_for_backward(3)


def test_function_outputs_free_their_backward():
    # the backward closure must not hold the outputs (a cycle through C++ that Python's GC
    # cannot see): dropping the output frees ctx
    import gc
    import weakref

    refs = []

    class Keep(lt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            refs.append(weakref.ref(ctx))
            ctx.save_for_backward(x)
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    y = Keep.apply(lt.ones(3, requires_grad=True))
    del y
    gc.collect()
    assert refs[0]() is None


@pytest.mark.parametrize("op, k", [(lambda u: u * 3.0, 3.0), (lambda u: u * lt.tensor([3.0, 3.0]), 3.0),
                                   (lambda u: 3.0 * u, 3.0), (lambda u: u % 7.0, 1.0)])
def test_writing_into_a_factor_whose_value_no_gradient_reads_is_fine(op, k):
    """v = u * c reads only c for u's gradient (as torch's MulBackward saves only what a
    wanted gradient needs), so writing into u afterwards is no error."""
    t = lt.tensor([1.0, 2.0], requires_grad=True)
    u = t * 2
    v = op(u)
    u += 1
    (v * u).sum().backward()
    # v = k u = 2kt (u % 7 = u here), then u = 2t + 1: d/dt (2kt (2t + 1)) = 2k (4t + 1)
    np.testing.assert_allclose(t.grad.numpy(), [2 * k * (4 * x + 1) for x in (1.0, 2.0)])


def test_writing_into_a_factor_a_gradient_reads_is_still_the_error():
    t = lt.tensor([1.0, 2.0], requires_grad=True)
    s = lt.tensor([3.0, 4.0], requires_grad=True)
    u = t * 2
    v = u * s  # s's gradient reads u
    u += 1
    with pytest.raises(RuntimeError, match="overwrote"):
        v.sum().backward()
