"""lt.compile: the decorator, the call form and `with lt.compile():`, names and their counters,
full_graph, and max_different_graphs (torch_xla's test/test_dynamic_shapes_detector.py ported:
there the limit counts distinct traced graphs; here it counts distinct input signatures, and
the (N+1)th raises a RuntimeError saying what differed).

Every value is compared with the same function run eagerly (not compiled) or with NumPy."""

import numpy as np
import pytest

import lazytrace as lt

F = lt.nn.functional


def np64(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def counter(name):
    return lt.metrics.counter_value(name) or 0


@pytest.fixture
def fresh_graphs():
    """Forget compiled graphs, so that a graph another test compiled is not a cache hit here
    (CompileCount[<name>] counts the compiles made under that name)."""
    lt.clear_caches()
    yield


def run_and_compare(f, optf, *args, **kwargs):
    """torch_xla's _run_and_compare: f eagerly and compiled give equal results."""
    out = f(*args, **kwargs)
    optout = optf(*args, **kwargs)
    np.testing.assert_allclose(np64(optout), np64(out), rtol=1e-6, atol=1e-7)
    return optout


# ---------------------------------------------------------------- forms and values


def test_decorator_without_parentheses(fresh_graphs):
    calls = 0

    @lt.compile
    def tc_bare(x):
        nonlocal calls
        calls += 1
        return lt.sin(x) + lt.cos(x)

    xn = np.array([0.0, 0.5, -1.25], dtype=np.float32)
    for _ in range(3):
        np.testing.assert_allclose(np64(tc_bare(lt.tensor(xn))),
                                   np.sin(xn.astype(np.float64)) + np.cos(xn), rtol=1e-6)
    assert calls == 1
    assert lt.metrics.counter_value("CompileCount[tc_bare]") == 1
    assert lt.metrics.counter_value("ExecuteCount[tc_bare]") == 3


def test_decorator_with_parentheses_uses_the_function_name(fresh_graphs):
    @lt.compile()
    def tc_paren(x):
        return x * x - 3

    np.testing.assert_allclose(tc_paren(lt.tensor([1.0, 2.0, 4.0])).numpy(), [-2.0, 1.0, 13.0])
    assert lt.metrics.counter_value("CompileCount[tc_paren]") == 1


def test_call_form_and_lambda_name(fresh_graphs):
    def foo2(x):
        return lt.sin(x) + lt.cos(x)

    compiled = lt.compile(foo2, name="tc_call_form")
    x = lt.tensor([0.1, 0.2, 0.3])
    run_and_compare(foo2, compiled, x)
    assert lt.metrics.counter_value("CompileCount[tc_call_form]") == 1
    before = counter("ExecuteCount[compiled]")
    lam = lt.compile(lambda x: x * 7 + 0.25)
    np.testing.assert_allclose(lam(lt.tensor([1.0, 2.0])).numpy(), [7.25, 14.25])
    assert counter("ExecuteCount[compiled]") == before + 1


def test_values_equal_eager_for_a_pytree_function(fresh_graphs):
    def f(d, scale, mode):
        s = d["a"] @ d["b"] * scale
        out = {"s": s, "parts": (s.sum(dim=0), lt.relu(s))}
        if mode == "with_mean":
            out["mean"] = s.mean()
        return out, mode

    cf = lt.compile(f, name="tc_pytree")
    rng = np.random.default_rng(0)
    an = rng.standard_normal((3, 4)).astype(np.float32)
    bn = rng.standard_normal((4, 2)).astype(np.float32)
    d = {"a": lt.tensor(an), "b": lt.tensor(bn)}
    for mode in ("plain", "with_mean"):
        (eager, m1), (comp, m2) = f(d, 2.0, mode), cf(d, 2.0, mode)
        assert m1 == m2 == mode
        assert list(comp) == list(eager)
        ref = an.astype(np.float64) @ bn * 2.0
        np.testing.assert_allclose(np64(comp["s"]), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np64(comp["parts"][0]), ref.sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np64(comp["parts"][1]), np.maximum(ref, 0), rtol=1e-5,
                                   atol=1e-6)
        if mode == "with_mean":
            np.testing.assert_allclose(float(comp["mean"]), ref.mean(), rtol=1e-5)


def test_results_are_materialized_by_the_call(fresh_graphs):
    cf = lt.compile(lambda x: x + 1, name="tc_materialized")
    before = counter("ExecuteCount[tc_materialized]")
    y = cf(lt.tensor([1.0, 2.0]))
    # the call ran the graph: reading y executes nothing more under this name
    assert counter("ExecuteCount[tc_materialized]") == before + 1
    np.testing.assert_allclose(y.numpy(), [2.0, 3.0])
    assert counter("ExecuteCount[tc_materialized]") == before + 1


def test_context_manager_runs_the_block_as_one_graph(fresh_graphs):
    xn = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    x, y = lt.tensor(xn), lt.tensor(xn * 3)
    pending = x * 5  # pending before the block: synced apart from it
    for k in range(2):
        with lt.compile(name="tc_block"):
            z = x + y
            w = lt.exp(z * 0.1) * 2
        assert lt.metrics.counter_value("ExecuteCount[tc_block]") == k + 1
    assert lt.metrics.counter_value("CompileCount[tc_block]") == 1
    np.testing.assert_allclose(z.numpy(), xn * 4)
    np.testing.assert_allclose(np64(w), np.exp(xn.astype(np.float64) * 0.4) * 2, rtol=1e-6)
    np.testing.assert_allclose(pending.numpy(), xn * 5)


def test_context_manager_propagates_exceptions():
    x = lt.ones(2)
    with pytest.raises(KeyError, match="boom"):
        with lt.compile(name="tc_block_raises"):
            z = x + 1
            raise KeyError("boom")
    np.testing.assert_allclose(z.numpy(), [2.0, 2.0])


# ---------------------------------------------------------------- caching


def test_traced_once_and_compiled_once_across_calls(fresh_graphs):
    calls = 0

    @lt.compile(name="tc_cache")
    def f(a, b):
        nonlocal calls
        calls += 1
        return lt.tanh(a @ b) + 1

    rng = np.random.default_rng(1)
    for i in range(6):
        an = rng.standard_normal((2, 3)).astype(np.float32)
        bn = rng.standard_normal((3, 2)).astype(np.float32)
        r = f(lt.tensor(an), lt.tensor(bn))
        np.testing.assert_allclose(np64(r), np.tanh(an.astype(np.float64) @ bn) + 1, rtol=1e-5,
                                   atol=1e-6)
        assert lt.metrics.counter_value("CompileCount[tc_cache]") == 1
    assert calls == 1
    assert lt.metrics.counter_value("ExecuteCount[tc_cache]") == 6
    # a new shape: traced and compiled again, the old one still cached
    r = f(lt.ones(4, 3), lt.ones(3, 2))
    np.testing.assert_allclose(np64(r), np.full((4, 2), np.tanh(3.0) + 1), rtol=1e-6)
    assert calls == 2
    assert lt.metrics.counter_value("CompileCount[tc_cache]") == 2
    f(lt.ones(2, 3), lt.ones(3, 2))
    assert calls == 2
    assert lt.metrics.counter_value("CompileCount[tc_cache]") == 2


def test_defaults_and_keywords_share_a_trace():
    calls = 0

    @lt.compile(name="tc_defaults", max_different_graphs=1)
    def f(x, scale=2.0, shift=1.0):
        nonlocal calls
        calls += 1
        return x * scale + shift

    x = lt.tensor([1.0, -1.0])
    for r in (f(x), f(x, 2.0), f(x, scale=2.0), f(x=x, shift=1.0), f(x, 2.0, 1.0)):
        np.testing.assert_allclose(r.numpy(), [3.0, -1.0])
    assert calls == 1


def test_closed_over_tensor_is_read_each_call():
    w = lt.tensor([1.0, 2.0])
    calls = 0

    @lt.compile(name="tc_closure")
    def f(x):
        nonlocal calls
        calls += 1
        return x * w

    np.testing.assert_allclose(f(lt.ones(2)).numpy(), [1.0, 2.0])
    w.copy_(lt.tensor([-3.0, 0.5]))
    np.testing.assert_allclose(f(lt.ones(2)).numpy(), [-3.0, 0.5])
    assert calls == 1


def test_in_place_writes_inside_are_written_back():
    state = lt.zeros(1)
    alias = state

    @lt.compile(name="tc_writes")
    def f(x):
        state.add_(1)
        return x * state

    outs = [f(lt.tensor([1.0, 2.0])).numpy() for _ in range(3)]
    np.testing.assert_allclose(outs, [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    np.testing.assert_allclose(state.numpy(), [3.0])
    np.testing.assert_allclose(alias.numpy(), [3.0])


def test_random_inside_draws_fresh_numbers():
    f = lt.compile(lambda x: x + lt.rand_like(x), name="tc_random")
    a, b = f(lt.zeros(32)).numpy(), f(lt.zeros(32)).numpy()
    assert np.all((a >= 0) & (a < 1)) and np.all((b >= 0) & (b < 1))
    assert not np.allclose(a, b)


# ---------------------------------------------------------------- a training step


def _mlp():
    return lt.nn.Sequential(lt.nn.Linear(4, 8), lt.nn.Tanh(), lt.nn.Linear(8, 2))


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adamw"])
def test_training_step_matches_uncompiled_steps(opt_name, fresh_graphs):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((6, 4)).astype(np.float32)
    Y = rng.standard_normal((6, 2)).astype(np.float32)
    name = "tc_train_" + opt_name

    def run(compiled):
        lt.manual_seed(0)
        model = _mlp()
        if opt_name == "adamw":
            opt = lt.optim.AdamW(model.parameters(), lr=0.05)
        else:
            opt = lt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        calls = 0

        def step(x, y):
            nonlocal calls
            calls += 1
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        fn = lt.compile(step, name=name) if compiled else step
        losses = [float(fn(lt.tensor(X), lt.tensor(Y))) for _ in range(5)]
        return [np64(p) for p in model.parameters()], losses, calls

    p_eager, l_eager, _ = run(False)
    p_comp, l_comp, calls = run(True)
    assert calls == 1
    assert lt.metrics.counter_value(f"CompileCount[{name}]") == 1
    assert lt.metrics.counter_value(f"ExecuteCount[{name}]") == 5
    np.testing.assert_allclose(l_comp, l_eager, rtol=1e-5)
    assert l_comp[-1] < l_comp[0]
    assert len(p_comp) == len(p_eager) == 4
    for a, b in zip(p_comp, p_eager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_training_step_sgd_matches_numpy_gradient_descent():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 3)).astype(np.float32)
    Y = rng.standard_normal((6, 2)).astype(np.float32)
    W0 = rng.standard_normal((2, 3)).astype(np.float32)
    b0 = rng.standard_normal(2).astype(np.float32)
    lr = 0.1

    model = lt.nn.Linear(3, 2)
    model.load_state_dict({"weight": lt.tensor(W0), "bias": lt.tensor(b0)})
    opt = lt.optim.SGD(model.parameters(), lr=lr)

    @lt.compile(name="tc_sgd_numpy")
    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    W, b = W0.astype(np.float64), b0.astype(np.float64)
    Xd, Yd = X.astype(np.float64), Y.astype(np.float64)
    for _ in range(5):
        loss = step(lt.tensor(X), lt.tensor(Y))
        d = Xd @ W.T + b - Yd
        np.testing.assert_allclose(float(loss), (d ** 2).mean(), rtol=1e-5)
        gW, gb = 2.0 / d.size * d.T @ Xd, 2.0 / d.size * d.sum(0)
        W, b = W - lr * gW, b - lr * gb
    np.testing.assert_allclose(np64(model.weight), W, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np64(model.bias), b, rtol=1e-5, atol=1e-6)


def test_lr_change_does_not_retrace():
    """A new rate reaches every later call of a step traced once, by SGD and AdamW alike
    (the replayed step never runs Optimizer.step in Python); a rate of 0 leaves p as it is."""
    p = lt.nn.Parameter(lt.tensor([1.0, -2.0]))
    opt = lt.optim.SGD([p], lr=0.1)
    calls = 0

    @lt.compile(name="tc_lr_change", max_different_graphs=1)
    def step():
        nonlocal calls
        calls += 1
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()

    expected = np.array([1.0, -2.0])
    for lr in (0.1, 0.25, 0.4, 0.0):
        opt.param_groups[0]["lr"] = lr
        step()
        expected = expected - lr * 2 * expected
        np.testing.assert_allclose(np64(p), expected, rtol=1e-6)
    assert calls == 1


def test_adamw_lr_schedule_inside_compile_matches_numpy():
    """AdamW under compile with the rate changed before each call (a scheduler's
    group["lr"] = ..., and update()) against NumPy's AdamW with the same rates."""
    w0 = np.array([0.5, -1.5, 2.0])
    p = lt.nn.Parameter(lt.tensor(w0.astype(np.float32)))
    opt = lt.optim.AdamW([p], lr=0.1, weight_decay=0.01)

    @lt.compile(name="tc_adamw_schedule", max_different_graphs=1)
    def step():
        opt.zero_grad()
        (p * p * p).sum().backward()
        opt.step()

    w, m, v = w0.copy(), np.zeros(3), np.zeros(3)
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.01
    for t, lr in enumerate((0.1, 0.05, 0.2, 0.01), start=1):
        if t % 2:
            opt.param_groups[0]["lr"] = lr
        else:
            opt.param_groups[0].update(lr=lr)
        step()
        g = 3 * w * w
        w = w * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        np.testing.assert_allclose(np64(p), w, rtol=1e-5, atol=1e-6)


def test_lr_must_be_a_non_negative_number():
    opt = lt.optim.SGD([lt.nn.Parameter(lt.ones(2))], lr=0.1)
    with pytest.raises(ValueError, match=r"\[SGD\].*'lr'\] must be >= 0"):
        opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(TypeError, match=r"\[SGD\].*'lr'\] must be a number"):
        opt.param_groups[0]["lr"] = "fast"
    assert opt.param_groups[0]["lr"] == 0.1


# ---------------------------------------------------------------- full_graph


def test_full_graph_with_item_inside_raises():
    @lt.compile(full_graph=True, name="tc_full_graph")
    def f(x):
        return x * x.sum().item()

    with pytest.raises(RuntimeError, match="full_graph"):
        f(lt.ones(3))


def test_full_graph_allows_a_pure_function(fresh_graphs):
    @lt.compile(full_graph=True, name="tc_full_graph_ok")
    def f(x):
        return (x * x).sum()

    assert float(f(lt.tensor([1.0, 2.0, 3.0]))) == 14.0
    assert float(f(lt.tensor([0.0, 2.0, 1.0]))) == 5.0
    assert lt.metrics.counter_value("CompileCount[tc_full_graph_ok]") == 1


def test_without_full_graph_a_reading_function_runs_as_plain_code():
    @lt.compile(name="tc_not_full_graph")
    def f(x):
        return x * x.sum().item()

    # the value read is the value of each call, not one frozen at trace time
    np.testing.assert_allclose(f(lt.ones(3)).numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_allclose(f(lt.ones(3) * 2).numpy(), [12.0, 12.0, 12.0])
    np.testing.assert_allclose(f(lt.tensor([1.0, 0.0, -3.0])).numpy(), [-2.0, 0.0, 6.0])


def test_full_graph_context_manager_is_refused_up_front():
    """A with-block runs as plain code, so full_graph cannot hold there: refused on entry
    (torch_xla's block would refuse the read inside), never silently ignored."""
    x = lt.ones(3)
    ran = []
    with pytest.raises(ValueError, match="full_graph needs a function"):
        with lt.compile(full_graph=True, name="tc_full_graph_block"):
            ran.append((x + 1).sum().item())
    assert ran == []


# ---------------------------------------------------------------- max_different_graphs


def test_single_signature_allowed_once():
    """test_single: one signature, one allowed."""

    def foo(x):
        return x + x

    optf = lt.compile(foo, max_different_graphs=1)
    inp = lt.rand(10)
    for _ in range(3):
        run_and_compare(foo, optf, inp)


def test_many_graphs_within_the_limit():
    """test_many_graphs: repeated steps reuse their graph. torch_xla's foo makes 3 distinct
    graphs out of 6 steps (its `step == (1, 4)` is never true); here each distinct static step
    is its own signature, so steps 0..2 repeated stay within a limit of 3."""
    calls = 0

    def foo(x, step):
        nonlocal calls
        calls += 1
        r0 = x + x + x
        r = r0 + x
        if step == 0:
            return r + x
        if step == 1:
            return r * 2
        if step == 2:
            return r * 4
        return r0

    optf = lt.compile(foo, max_different_graphs=3, name="tc_many_graphs")
    xn = np.linspace(0.0, 1.0, 10, dtype=np.float32)
    inp = lt.tensor(xn)
    expected = {0: 5 * xn, 1: 8 * xn, 2: 16 * xn}
    for step in (0, 1, 2, 0, 1, 2, 2):
        out = optf(inp, step)
        np.testing.assert_allclose(out.numpy(), expected[step], rtol=1e-6)
    traced = calls
    eager = [foo(inp, s) for s in range(3)]
    for s in range(3):
        np.testing.assert_allclose(eager[s].numpy(), expected[s], rtol=1e-6)
    assert traced == 3
    with pytest.raises(RuntimeError, match="max_different_graphs is 3"):
        optf(inp, 3)


def test_limit_exceeded_different_input_shape():
    def foo(x):
        return x + x

    optf = lt.compile(foo, max_different_graphs=1, name="tc_limit_shape")
    run_and_compare(foo, optf, lt.rand(10))
    with pytest.raises(RuntimeError) as info:
        optf(lt.rand(5))
    msg = str(info.value)
    assert "max_different_graphs is 1" in msg
    assert "got f32[5] at args[0], expected f32[10]" in msg
    assert "tc_limit_shape" in msg


def test_limit_exceeded_different_dtype():
    optf = lt.compile(lambda x: x + x, max_different_graphs=1, name="tc_limit_dtype")
    optf(lt.rand(10))
    with pytest.raises(RuntimeError, match=r"got f64\[10\] at args\[0\], expected f32\[10\]"):
        optf(lt.rand(10, dtype=lt.float64))


def test_limit_exceeded_different_static_value():
    """test_graph_limit_exceeded_common_sequence_mismatch: step 0 (add) then step 2 (mul)."""

    def foo(x, step):
        if step == 0:
            return x + x
        return x * 5

    optf = lt.compile(foo, max_different_graphs=1, name="tc_limit_static")
    inp = lt.rand(10)
    run_and_compare(foo, optf, inp, 0)
    with pytest.raises(RuntimeError, match=r"got int 2 at args\[1\], expected int 0"):
        optf(inp, 2)


def test_limit_exceeded_third_signature_with_two_allowed():
    """test_graph_limit_exceeded_children_mismatch / _children_early_stop: two steps fit, the
    third does not, and the two traced ones still run afterwards."""

    def foo(x, step):
        r = x + x
        if step == 0:
            return r * 2
        if step == 1:
            return r + x
        return r / 3

    optf = lt.compile(foo, max_different_graphs=2, name="tc_limit_third")
    xn = np.array([3.0, 6.0, -1.5], dtype=np.float32)
    inp = lt.tensor(xn)
    run_and_compare(foo, optf, inp, 0)
    run_and_compare(foo, optf, inp, 1)
    with pytest.raises(RuntimeError) as info:
        optf(inp, 2)
    msg = str(info.value)
    assert "would produce graph 3" in msg and "max_different_graphs is 2" in msg
    assert "got int 2 at args[1]" in msg
    np.testing.assert_allclose(optf(inp, 0).numpy(), 4 * xn)
    np.testing.assert_allclose(optf(inp, 1).numpy(), 3 * xn)


def test_limit_exceeded_default_argument():
    """test_graph_limit_exceeded_common_sequence_early_stop: foo(x, True), then foo(x) whose
    default mul=False is bound and differs."""

    def foo(x, mul=False):
        r = x + x
        if mul:
            return r * 10
        return r

    optf = lt.compile(foo, max_different_graphs=1, name="tc_limit_default")
    inp = lt.rand(10)
    run_and_compare(foo, optf, inp, True)
    # the same signature by keyword: within the limit
    run_and_compare(foo, optf, inp, mul=True)
    with pytest.raises(RuntimeError, match=r"got bool False at args\[1\], expected bool True"):
        optf(inp)


def test_limit_counts_per_compiled_function():
    def foo(x):
        return x * 2

    a = lt.compile(foo, max_different_graphs=1, name="tc_limit_a")
    b = lt.compile(foo, max_different_graphs=1, name="tc_limit_b")
    np.testing.assert_allclose(a(lt.ones(2)).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(b(lt.ones(3)).numpy(), [2.0, 2.0, 2.0])
    with pytest.raises(RuntimeError, match="tc_limit_a"):
        a(lt.ones(3))


def test_no_limit_by_default():
    calls = 0

    @lt.compile(name="tc_no_limit")
    def f(x):
        nonlocal calls
        calls += 1
        return x.sum()

    for n in range(1, 8):
        assert float(f(lt.ones(n))) == n
    assert calls == 7


def test_backward_through_compiled_output_outside_the_call():
    f = lt.compile(lambda x, w: (lt.tanh(x) * w).sum(), name="tc_backward_outside")
    xn, wn = np.array([0.5, -1.0]), np.array([2.0, 3.0])
    x = lt.tensor(xn, dtype=lt.float64, requires_grad=True)
    w = lt.tensor(wn, dtype=lt.float64, requires_grad=True)
    y = f(x, w)
    assert y.requires_grad
    y.backward()
    np.testing.assert_allclose(np64(x.grad), wn * (1 - np.tanh(xn) ** 2), rtol=1e-10)
    np.testing.assert_allclose(np64(w.grad), np.tanh(xn), rtol=1e-10)


def test_assume_pure_forward_inside_a_compiled_training_step():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((6, 4)).astype(np.float32)
    Y = rng.standard_normal((6, 2)).astype(np.float32)

    def run(mode):
        lt.manual_seed(0)
        m = lt.nn.Linear(4, 2)
        opt = lt.optim.SGD(m.parameters(), lr=0.1)
        calls = 0

        def fwd(params, x):
            nonlocal calls
            calls += 1
            return lt.func.functional_call(m, params, (x,))

        pf = lt.assume_pure(fwd) if mode != "eager" else fwd

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(pf(dict(m.named_parameters()), x), y)
            loss.backward()
            opt.step()
            return loss

        fn = lt.compile(step, name="tc_pure_in_compile") if mode == "compile" else step
        losses = [float(fn(lt.tensor(X), lt.tensor(Y))) for _ in range(4)]
        return losses, np64(m.weight), np64(m.bias), calls

    l_e, w_e, b_e, _ = run("eager")
    l_c, w_c, b_c, calls = run("compile")
    assert calls == 1
    np.testing.assert_allclose(l_c, l_e, rtol=1e-6)
    np.testing.assert_allclose(w_c, w_e, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b_c, b_e, rtol=1e-6, atol=1e-7)
    assert l_c[-1] < l_c[0]


def test_nested_compiled_functions():
    inner = lt.compile(lambda x: x * 2, name="tc_inner")
    outer = lt.compile(lambda x: inner(x) + 1, name="tc_outer")
    np.testing.assert_allclose(outer(lt.tensor([1.0, 2.5])).numpy(), [3.0, 6.0])
    np.testing.assert_allclose(outer(lt.tensor([0.0, -1.0])).numpy(), [1.0, -1.0])


def test_full_graph_with_sync_or_float_inside_raises():
    @lt.compile(full_graph=True, name="tc_full_graph_sync")
    def with_sync(x):
        y = x + 1
        lt.sync()
        return y

    @lt.compile(full_graph=True, name="tc_full_graph_float")
    def with_float(x):
        return x * float(x.sum())

    with pytest.raises(RuntimeError, match="full_graph"):
        with_sync(lt.ones(2))
    with pytest.raises(RuntimeError, match="full_graph"):
        with_float(lt.ones(2))


def test_full_graph_with_while_loop_inside():
    @lt.compile(full_graph=True, name="tc_full_graph_while")
    def f(n):
        return lt.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 2),
                             (lt.tensor(0), lt.ones(1)))[1]

    assert f(lt.tensor(3)).tolist() == [8.0]
    assert f(lt.tensor(5)).tolist() == [32.0]


def test_failed_trace_does_not_count_against_the_limit():
    state = {"raise": True}

    @lt.compile(name="tc_failed_trace", max_different_graphs=1)
    def f(x):
        if state["raise"]:
            raise ValueError("from the user")
        return x + 1

    with pytest.raises(ValueError, match="from the user"):
        f(lt.ones(1))
    state["raise"] = False
    assert f(lt.ones(1)).tolist() == [2.0]


def test_passes_switched_off_compute_the_same_values_and_errors_name_the_passes():
    x = lt.randn(32, 32)
    lt.sync()
    want = (lt.exp(x.t() * 2.0) + 1.0).numpy()
    before = lt.debug.set_disabled_passes("all")
    try:
        assert lt.debug.disabled_passes() == lt.debug.pass_names()
        got = lt.exp(x.t() * 2.0) + 1.0
        assert "4 steps" in lt.debug.to_program(got)  # the transpose copied; mul, exp, add apart
        np.testing.assert_array_equal(got.numpy(), want)
    finally:
        lt.debug.set_disabled_passes(before)
    assert lt.debug.disabled_passes() == []
    with pytest.raises(ValueError, match=r"\[passes\] no pass is named 'fuzion'"):
        lt.debug.set_disabled_passes(["fuzion"])


def test_the_readme_lists_every_pass_that_can_be_switched_off():
    import os
    import re

    repo = os.environ.get("LAZYTRACE_REPO", os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        row = next(line for line in f if line.startswith("| `LAZYTRACE_DISABLE_PASSES="))
    listed = set(re.findall(r"`([a-z_]+)`", row))
    assert set(lt.debug.pass_names()) - listed == set()


def test_kernel_choices_list_each_timed_product_and_none_with_the_pass_off():
    a = lt.randn(48, 160)
    b = lt.randn(200, 160)  # a @ b.T: 48 x 160 @ 160 x 200, stored transposed ("NT")
    lt.sync()
    want = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64).T
    got = (a @ b.t()).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    choices = lt.debug.kernel_choices()
    line = next(ln for ln in choices.splitlines() if ln.startswith("matmul 48 x 160 @ 160 x 200 (NT"))
    kept = line.split(": ")[1].split(" ")[0]
    assert kept in ("lazytrace", "openblas", "onednn", "libxsmm"), line
    assert f" {kept} " in line.split("(GFLOP/s")[1] + " ", line  # the kept one was timed
    np.testing.assert_array_equal((a @ b.t()).numpy(), got)  # the first run's bits, again
    before = lt.debug.set_disabled_passes("gemm_choice")
    try:
        c, d = lt.randn(40, 176), lt.randn(176, 72)
        lt.sync()
        want = c.numpy().astype(np.float64) @ d.numpy().astype(np.float64)
        np.testing.assert_allclose((c @ d).numpy(), want, rtol=1e-4, atol=1e-4)
        assert lt.debug.kernel_choices() == choices  # nothing timed with the pass off
    finally:
        lt.debug.set_disabled_passes(before)


# ---------------------------------------------------------------- train() and eval()


class _Branchy(lt.nn.Module):
    """forward reads self.training: x * 2 in training, x * 3 in evaluation."""

    def forward(self, x):
        return x * (2.0 if self.training else 3.0)


def test_compile_traces_again_when_a_module_it_read_flips_train_eval():
    m = _Branchy()
    calls = 0

    @lt.compile(name="tc_train_eval")
    def f(x):
        nonlocal calls
        calls += 1
        return m(x)

    x = lt.ones(2)
    for mode, factor, traces in ((True, 2, 1), (True, 2, 1), (False, 3, 2), (False, 3, 2),
                                 (True, 2, 2), (False, 3, 2)):
        m.train(mode)
        np.testing.assert_allclose(np64(f(x)), [factor, factor])
        assert calls == traces


def test_compile_and_assume_pure_dropout_stops_in_eval():
    """Dropout traced in training mode: about half the values zeroed; after eval(), none
    (the same compiled function, then assume_pure through functional_call)."""
    lt.manual_seed(0)
    drop = lt.nn.Sequential(lt.nn.Dropout(0.5))
    x = lt.ones(4000)
    compiled = lt.compile(lambda t: drop(t), name="tc_dropout_eval")
    pure = lt.assume_pure(lambda t: lt.func.functional_call(drop, {}, (t,)))
    for f in (compiled, pure):
        drop.train()
        y = np64(f(x))
        assert 0.4 < (y == 0).mean() < 0.6
        np.testing.assert_allclose(y[y != 0], 2.0)
        drop.eval()
        np.testing.assert_array_equal(np64(f(x)), np.ones(4000))


def test_a_flag_read_inside_a_nested_pure_function_guards_the_outer_one():
    """The inner assume_pure is a cache hit when the outer compile traces again, yet the
    outer still learns that it depends on the inner module's flag."""
    m = _Branchy()
    inner = lt.assume_pure(lambda t: m(t))
    inner(lt.ones(1))  # traced here, before the outer function exists
    outer = lt.compile(lambda t: inner(t) + 1, name="tc_nested_flags")
    np.testing.assert_allclose(np64(outer(lt.ones(1))), [3.0])
    m.eval()
    np.testing.assert_allclose(np64(outer(lt.ones(1))), [4.0])


def test_scan_with_a_pure_body_traces_again_when_a_flag_flips():
    m = _Branchy()
    calls = 0

    def body(c, x):
        nonlocal calls
        calls += 1
        y = m(x)
        return c + y, y

    xs = lt.tensor([[1.0], [2.0]])
    for mode, factor, traces in ((True, 2, 1), (True, 2, 1), (False, 3, 2), (True, 2, 2)):
        m.train(mode)
        final, ys = lt.scan(body, lt.zeros(1), xs, is_fn_pure=True)
        np.testing.assert_allclose(np64(ys), [[factor], [2 * factor]])
        np.testing.assert_allclose(np64(final), [3 * factor])
        assert calls == traces


def test_backward_inside_with_gradients_left_unused_raises():
    """Gradients computed inside a compiled function stay inside: backward() alone (the
    step outside) would never set .grad, so it raises; the whole step inside trains."""
    w = lt.nn.Parameter(lt.ones(2))

    @lt.compile(name="tc_backward_only")
    def backward_only(x):
        (w * x).sum().backward()

    with pytest.raises(RuntimeError, match=r"\[compile\] 'tc_backward_only' runs backward\(\)"):
        backward_only(lt.ones(2) * 3)
    assert w.grad is None
    opt = lt.optim.SGD([w], lr=0.1)

    @lt.compile(name="tc_whole_step")
    def step(x):
        opt.zero_grad()
        (w * x).sum().backward()
        opt.step()

    step(lt.ones(2) * 3)
    np.testing.assert_allclose(np64(w), [0.7, 0.7], rtol=1e-6)


def test_writes_into_arguments_reach_the_caller_under_compile_and_are_refused_by_assume_pure():
    """In place on an argument: eager code changes the caller's tensor, and so does a
    compiled function (written back after each call); assume_pure, whose caller would not see
    the write, refuses it."""

    def f(x, y):
        x += y
        return x * 2

    for tool in (lambda g: g, lambda g: lt.compile(g, name="tc_arg_write")):
        g = tool(f)
        for v in (1.0, 4.0):
            x = lt.tensor([v, -v])
            np.testing.assert_allclose(np64(g(x, lt.ones(2))), [2 * (v + 1), 2 * (1 - v)])
            np.testing.assert_allclose(np64(x), [v + 1, 1 - v])
    x = lt.tensor([1.0, -1.0])
    with pytest.raises(ValueError, match=r"\[assume_pure\] .* writes in place into its tensor "
                                         r"argument 0 \(f32\[2\]"):
        lt.assume_pure(f)(x, lt.ones(2))
    np.testing.assert_allclose(np64(x), [1.0, -1.0])


def test_gradients_some_of_which_an_update_uses_are_fine():
    """Backward that reaches parameters the step leaves alone (a GAN generator's step also
    fills the discriminator's gradients) is not the error: the used ones train."""
    g = lt.nn.Parameter(lt.tensor([1.0]))
    d = lt.nn.Parameter(lt.tensor([3.0]))
    opt = lt.optim.SGD([g], lr=0.1)

    @lt.compile(name="tc_partial_step")
    def step():
        opt.zero_grad()
        (g * d).sum().backward()
        opt.step()

    step()
    np.testing.assert_allclose(np64(g), [1.0 - 0.1 * 3.0])
    np.testing.assert_allclose(np64(d), [3.0])


def test_backward_after_the_compiled_object_is_gone():
    """The cache holds the function, not the wrapper lt.compile made: a backward that traces
    the function again works after the wrapper is collected."""
    import gc

    w = lt.tensor([2.0], requires_grad=True)

    def f(x):
        return (x * w).sum()

    y = lt.compile(f, name="tc_temporary")(lt.ones(1) * 3)
    gc.collect()
    y.backward()
    np.testing.assert_allclose(np64(w.grad), [3.0])


def test_param_groups_pickle_and_copy_as_dicts():
    import copy
    import pickle

    opt = lt.optim.SGD([lt.nn.Parameter(lt.ones(2))], lr=0.25)
    for g in (copy.deepcopy(opt.param_groups[0]), pickle.loads(pickle.dumps(opt.param_groups[0]))):
        assert type(g) is dict and g["lr"] == 0.25


def test_backward_inside_compile_reaches_arguments_that_require_grad():
    """As eagerly: a compiled function may differentiate with respect to its arguments and
    return their gradients; one that throws them away is the error, as for outer tensors."""

    def input_grad(x):
        (x * x * 3).sum().backward()
        return x.grad

    f = lt.compile(input_grad, name="tc_arg_grad")
    for v in ([1.0, 2.0], [-3.0, 0.5]):
        x = lt.tensor(v, requires_grad=True)
        np.testing.assert_allclose(np64(f(x)), 6 * np.array(v))

    def discards(x):
        (x * x).sum().backward()
        return x * 2

    with pytest.raises(RuntimeError, match=r"runs backward\(\) and leaves gradients of 1 tensor"):
        lt.compile(discards, name="tc_arg_grad_lost")(lt.tensor([1.0], requires_grad=True))


def test_arguments_inside_compile_are_leaves_or_not_as_outside():
    """A non-leaf argument that requires grad is written in place as eagerly (its stand-in is
    no leaf); whether an argument requires grad is part of the signature; a function whose
    backward reached its arguments gives results without gradient history (as one that
    writes), so a backward through them is a clear error; LAZYTRACE_CHECK_PURITY's retrace
    makes the same stand-ins."""

    def bump(x):
        x.add_(1.0)
        return x * 2

    w = lt.tensor([1.0, 2.0], requires_grad=True)
    x = w * 1.0
    np.testing.assert_allclose(np64(lt.compile(bump, name="tc_nonleaf_write")(x)), [4.0, 6.0])
    np.testing.assert_allclose(np64(x), [2.0, 3.0])

    def input_grad(x):
        y = (x * x * 3).sum()
        y.backward()
        return x.grad, y

    f = lt.compile(input_grad, name="tc_arg_grad_key")
    g, y = f(lt.tensor([1.0, 2.0], requires_grad=True))
    np.testing.assert_allclose(np64(g), [6.0, 12.0])
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()
    # the same shapes without requires_grad: another trace, where backward() is the error
    with pytest.raises(RuntimeError, match="backward"):
        f(lt.tensor([1.0, 2.0]))


def test_check_purity_retraces_compile_with_the_same_stand_ins():
    import os
    import subprocess
    import sys

    code = """
import lazytrace as lt
def input_grad(x):
    (x * x * 3).sum().backward()
    return x.grad
f = lt.compile(input_grad, name="purity_args")
for v in ([1.0, 2.0], [-3.0, 0.5]):
    print(f(lt.tensor(v, requires_grad=True)).tolist())
"""
    env = dict(os.environ, LAZYTRACE_CHECK_PURITY="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr[-400:]
    assert r.stdout.split("\n")[:2] == ["[6.0, 12.0]", "[-18.0, 3.0]"]


def test_backward_inside_onto_a_grad_set_outside_is_refused_not_silently_dropped():
    """Eager code adds a backward's gradient to the .grad already there; a compiled function's
    backward starts from none, so where that would differ the call is an error."""
    x = lt.tensor([1.0, 2.0, 3.0], dtype=lt.float64)
    w = lt.tensor([0.1, 0.2, 0.3], dtype=lt.float64, requires_grad=True)

    @lt.compile
    def grad_of_w(x):
        (x * w).sum().backward()
        return w.grad

    (x * w).sum().backward()
    with pytest.raises(RuntimeError, match="whose .grad is already set outside it"):
        grad_of_w(x)
    w.grad = None
    assert grad_of_w(x).tolist() == [1.0, 2.0, 3.0] and w.grad is None
    # cleared inside before backward (torch's idiom): eager and compiled agree, no error
    opt = lt.optim.SGD([w], lr=0.1)

    @lt.compile
    def step(x):
        opt.zero_grad()
        (x * w).sum().backward()
        opt.step()

    (x * w).sum().backward()
    step(x)
    np.testing.assert_allclose(w.detach().numpy(), [0.0, 0.0, 0.0], atol=1e-15)
    # an argument that is a leaf
    @lt.compile
    def g(v):
        (v * v).sum().backward()
        return v.grad

    v = lt.tensor([1.0, 2.0], requires_grad=True)
    assert g(v).tolist() == [2.0, 4.0]
    v.grad = lt.ones(2)
    with pytest.raises(RuntimeError, match="Clear the gradients before the call"):
        g(v)


def test_module_zero_grad_inside_clears_a_grad_set_outside():
    m = lt.nn.Linear(2, 1)
    opt = lt.optim.SGD(m.parameters(), lr=0.1)

    @lt.compile
    def step(x):
        m.zero_grad()
        m(x).sum().backward()
        opt.step()

    x = lt.ones(4, 2)
    m(x).sum().backward()  # a gradient from outside, cleared inside as eager code would
    before = m.weight.detach().numpy().copy()
    step(x)
    np.testing.assert_allclose(m.weight.detach().numpy(), before - 0.1 * 4, rtol=1e-6)
