"""Gradient clipping (lt.nn.utils) and learning-rate schedules (lt.optim.lr_scheduler),
against NumPy in float64 and against the rates torch's own tests list."""

import math

import numpy as np
import pytest

import lazytrace as lt
from lazytrace.optim import lr_scheduler as S


def grads_of(shapes, seed=0, dtype=np.float32):
    """Parameters whose gradients are known arrays, and those arrays."""
    rng = np.random.default_rng(seed)
    params, grads = [], []
    for shape in shapes:
        g = (rng.standard_normal(shape) * 3).astype(dtype)
        p = lt.zeros(*shape, dtype=lt.float64 if dtype == np.float64 else lt.float32)
        p.requires_grad_()
        (p * lt.tensor(g)).sum().backward()
        params.append(p)
        grads.append(g.astype(np.float64))
    return params, grads


def np_norm(grads, p):
    flat = np.concatenate([g.ravel() for g in grads])
    return np.abs(flat).max() if math.isinf(p) else (np.abs(flat) ** p).sum() ** (1 / p)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_numpy(p, max_norm):
    params, grads = grads_of([(3, 4), (5,), (2, 2, 2)])
    held = params[0].grad  # a holder of the old gradient sees the clipping (in place)
    total = lt.nn.utils.clip_grad_norm_(params, max_norm, norm_type=p)
    ref = np_norm(grads, p)
    assert total.shape == () and total.dtype == lt.float32
    np.testing.assert_allclose(float(total), ref, rtol=2e-6)
    coef = min(1.0, max_norm / (ref + 1e-6))
    for param, g in zip(params, grads):
        np.testing.assert_allclose(param.grad.numpy(), g * coef, rtol=2e-6, atol=1e-12)
    np.testing.assert_allclose(held.numpy(), grads[0] * coef, rtol=2e-6, atol=1e-12)
    if max_norm < ref:
        clipped = np_norm([q.grad.numpy().astype(np.float64) for q in params], p)
        np.testing.assert_allclose(clipped, max_norm, rtol=1e-5)


def test_clip_grad_norm_float64_skips_missing_and_takes_one_tensor():
    params, grads = grads_of([(4,), (3,)], seed=1, dtype=np.float64)
    no_grad = lt.zeros(2, requires_grad=True)
    total = lt.nn.utils.clip_grad_norm_(params + [no_grad], 1.0)
    assert total.dtype == lt.float64
    np.testing.assert_allclose(float(total), np_norm(grads, 2), rtol=1e-14)
    assert no_grad.grad is None
    one, g = grads_of([(6,)], seed=2)
    np.testing.assert_allclose(float(lt.nn.utils.clip_grad_norm_(one[0], 1e9)),
                               np_norm(g, 2), rtol=2e-6)
    assert float(lt.nn.utils.clip_grad_norm_([no_grad], 1.0)) == 0.0


def test_total_norm_and_clip_with_norm_split_as_torch():
    params, grads = grads_of([(3, 3), (7,)], seed=3)
    total = lt.nn.utils.get_total_norm([p.grad for p in params], 2.0)
    np.testing.assert_allclose(float(total), np_norm(grads, 2), rtol=2e-6)
    lt.nn.utils.clip_grads_with_norm_(params, 1.0, total)
    for param, g in zip(params, grads):
        np.testing.assert_allclose(param.grad.numpy(), g / (np_norm(grads, 2) + 1e-6),
                                   rtol=2e-6)


def test_nonfinite_norm():
    params, _ = grads_of([(3,)])
    with lt.no_grad():
        params[0].grad[1] = float("nan")
    with pytest.raises(RuntimeError, match=r"clip_grad_norm_.*nan.*error_if_nonfinite"):
        lt.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    total = lt.nn.utils.clip_grad_norm_(params, 1.0)  # as torch: NaN in, NaN out
    assert math.isnan(float(total)) and np.isnan(params[0].grad.numpy()).all()


def test_clip_grad_value_matches_numpy():
    params, grads = grads_of([(4, 5), (3,)], seed=4)
    lt.nn.utils.clip_grad_value_(params, 1.5)
    for param, g in zip(params, grads):
        np.testing.assert_array_equal(param.grad.numpy(), np.clip(g, -1.5, 1.5).astype(np.float32))


def test_clipping_mistakes_are_errors():
    params, _ = grads_of([(3,)])
    with pytest.raises(ValueError, match=r"clip_grad_norm_.*max_norm.*-1"):
        lt.nn.utils.clip_grad_norm_(params, -1.0)
    with pytest.raises(ValueError, match=r"total_norm.*norm_type.*positive"):
        lt.nn.utils.clip_grad_norm_(params, 1.0, norm_type=0)
    with pytest.raises(TypeError, match=r"clip_grad_norm_.*parameter 1 is a str"):
        lt.nn.utils.clip_grad_norm_([params[0], "w"], 1.0)
    with pytest.raises(TypeError, match=r"clip_grad_value_.*clip_value must be a number"):
        lt.nn.utils.clip_grad_value_(params, None)
    with pytest.raises(ValueError, match=r"clip_grad_value_.*clip_value must be >= 0"):
        lt.nn.utils.clip_grad_value_(params, -2.0)
    with pytest.raises(ValueError, match=r"total_norm.*tensor 0 is i64"):
        lt.nn.utils.get_total_norm([lt.tensor([1, 2])])


def test_a_compiled_step_that_clips_is_one_graph_and_equals_eager():
    lt.manual_seed(3)
    model = lt.nn.Sequential(lt.nn.Linear(4, 8), lt.nn.Tanh(), lt.nn.Linear(8, 2))
    init = {k: v.numpy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(5)
    data = [(rng.standard_normal((6, 4)).astype(np.float32) * (1 + 10 * s),
             rng.standard_normal((6, 2)).astype(np.float32)) for s in range(4)]

    def run(compiled):
        model.load_state_dict({k: lt.tensor(v) for k, v in init.items()})
        opt = lt.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            loss = lt.nn.functional.mse_loss(model(x), y)
            loss.backward()
            norm = lt.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
            opt.zero_grad()
            return norm

        f = lt.compile(step, name="clip_step") if compiled else step
        norms = [float(f(lt.tensor(x), lt.tensor(y))) for x, y in data]
        return norms, {k: v.numpy() for k, v in model.state_dict().items()}

    eager_norms, eager = run(False)
    lt.clear_caches()
    norms, compiled = run(True)
    assert lt.metrics.counter_value("CompileCount[clip_step]") == 1
    assert min(eager_norms) > 0.25  # every step clips
    np.testing.assert_allclose(norms, eager_norms, rtol=1e-5)
    for k in eager:
        np.testing.assert_allclose(compiled[k], eager[k], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- schedules


def rates(make, epochs=10, lr=0.05, groups=1):
    params = [lt.zeros(2, requires_grad=True) for _ in range(groups)]
    opt = lt.optim.SGD([{"params": [p], "lr": lr * (i + 1)} for i, p in enumerate(params)],
                       lr=lr)
    sched = make(opt)
    out = []
    for _ in range(epochs):
        out.append([g["lr"] for g in opt.param_groups])
        assert sched.get_last_lr() == out[-1]
        opt.step()
        sched.step()
    return np.array(out)


# the rates torch's test_lrscheduler.py lists for these settings (lr 0.05, 10 epochs)
TORCH_CASES = {
    "step": (lambda o: S.StepLR(o, step_size=3, gamma=0.1),
             [0.05] * 3 + [0.005] * 3 + [0.0005] * 3 + [0.00005]),
    "multistep": (lambda o: S.MultiStepLR(o, milestones=[2, 5, 9], gamma=0.1),
                  [0.05] * 2 + [0.005] * 3 + [0.0005] * 4 + [0.00005]),
    "constant": (lambda o: S.ConstantLR(o, factor=1 / 2, total_iters=4), [0.025] * 4 + [0.05] * 6),
    "linear": (lambda o: S.LinearLR(o, start_factor=1 / 2, total_iters=4),
               [0.025, 0.03125, 0.0375, 0.04375] + [0.05] * 6),
    "exponential": (lambda o: S.ExponentialLR(o, gamma=0.9), [0.05 * 0.9**x for x in range(10)]),
    "polynomial": (lambda o: S.PolynomialLR(o, total_iters=4, power=1.0),
                   [0.05 * (1 - x / 4) for x in range(4)] + [0.0] * 6),
    "cosine": (lambda o: S.CosineAnnealingLR(o, T_max=10),
               [0.05 * (1 + math.cos(math.pi * x / 10)) / 2 for x in range(10)]),
    "lambda": (lambda o: S.LambdaLR(o, lambda x: 0.95**x), [0.05 * 0.95**x for x in range(10)]),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_schedules_give_torchs_rates(name):
    make, expected = TORCH_CASES[name]
    got = rates(make, groups=2)
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[:, 1], 2 * np.array(expected), rtol=1e-12, atol=1e-15)


def test_warm_restarts_follow_the_periods_a_counter_gives():
    # the reference steps torch's counters: T_cur += 1; past T_i it restarts, T_i *= T_mult
    for t0, mult in [(3, 1), (2, 2), (1, 3)]:
        expected, t_cur, t_i = [], 0, t0
        for _ in range(30):
            expected.append(0.01 + (0.05 - 0.01) * (1 + math.cos(math.pi * t_cur / t_i)) / 2)
            t_cur += 1
            if t_cur >= t_i:
                t_cur, t_i = t_cur - t_i, t_i * mult
        got = rates(lambda o: S.CosineAnnealingWarmRestarts(o, T_0=t0, T_mult=mult,
                                                            eta_min=0.01), epochs=30)
        np.testing.assert_allclose(got[:, 0], expected, rtol=1e-12)


def test_warm_restarts_with_growing_periods_far_out_and_fractional_epochs():
    # restarts at sums of a geometric series (1 + 3 + 9 + 27 + 81 = 121): a logarithm of
    # them rounds either way, a count does not
    for t0, mult in [(1, 3), (1, 10), (5, 3)]:
        p = lt.zeros(1, requires_grad=True)
        opt = lt.optim.SGD([p], lr=0.1)
        sched = S.CosineAnnealingWarmRestarts(opt, T_0=t0, T_mult=mult)
        t_cur, t_i = 0, t0
        for epoch in range(1, 700):
            t_cur += 1
            if t_cur >= t_i:
                t_cur, t_i = t_cur - t_i, t_i * mult
            sched.step()
            want = 0.1 * (1 + math.cos(math.pi * t_cur / t_i)) / 2
            assert math.isclose(opt.param_groups[0]["lr"], want, rel_tol=1e-12,
                                abs_tol=1e-15), (t0, mult, epoch)
    # torch documents step(epoch + i / iters) for per-iteration restarts
    p = lt.zeros(1, requires_grad=True)
    opt = lt.optim.SGD([p], lr=0.1)
    sched = S.CosineAnnealingWarmRestarts(opt, T_0=4)
    sched.step(2.5)
    assert math.isclose(opt.param_groups[0]["lr"], 0.1 * (1 + math.cos(math.pi * 2.5 / 4)) / 2)


def test_clipping_by_infinity_reports_the_norm_and_changes_nothing():
    params, grads = grads_of([(3, 2)], seed=5)
    total = lt.nn.utils.clip_grad_norm_(params, math.inf)
    np.testing.assert_allclose(float(total), np_norm(grads, 2), rtol=2e-6)
    np.testing.assert_allclose(params[0].grad.numpy(), grads[0], rtol=1e-6)


def test_the_norm_of_gradients_with_history_is_not_recorded():
    x = lt.tensor([1.0, 2.0], requires_grad=True)
    (g,) = lt.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad
    assert not lt.nn.utils.get_total_norm([g]).requires_grad


def test_a_pure_function_reads_an_outer_tensors_grad():
    w = lt.tensor([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()
    norm = lt.assume_pure(lambda s: lt.nn.utils.get_total_norm([w.grad]) * s)
    assert float(norm(lt.tensor(2.0))) == 20.0
    with pytest.raises(ValueError, match=r"\[assume_pure\] the traced function writes into"):
        lt.assume_pure(lambda s: lt.nn.utils.clip_grad_norm_([w], 1.0) * s)(lt.tensor(1.0))
    np.testing.assert_array_equal(w.grad.numpy(), [6.0, 8.0])


def test_sequential_warmup_then_cosine():
    got = rates(lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, total_iters=3),
                                             S.CosineAnnealingLR(o, T_max=5)], milestones=[3]),
                epochs=9)
    warm = [0.05 * (0.1 + 0.9 * x / 3) for x in range(3)]
    cos = [0.05 * (1 + math.cos(math.pi * x / 5)) / 2 for x in range(6)]
    np.testing.assert_allclose(got[:, 0], warm + cos, rtol=1e-12, atol=1e-15)


def test_reduce_on_plateau():
    p = lt.zeros(2, requires_grad=True)
    opt = lt.optim.SGD([p], lr=1.0)
    sched = S.ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1, min_lr=0.2)
    # improving, then flat: the second epoch without improvement halves the rate, the
    # cooldown epoch counts for nothing, then again; min_lr stops it
    seen = []
    for metric in [5, 4, 4, 4, 4, 4, 4, 4, 4, 4]:
        sched.step(lt.tensor(float(metric)))
        seen.append(opt.param_groups[0]["lr"])
    assert seen == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2]


def test_resuming_a_schedule_from_its_state_dict():
    def make(o, last_epoch=-1):
        return S.StepLR(o, step_size=2, gamma=0.5, last_epoch=last_epoch)

    full = rates(make, epochs=8)
    p = lt.zeros(2, requires_grad=True)
    opt = lt.optim.SGD([p], lr=0.05)
    sched = make(opt)
    for _ in range(5):
        sched.step()
    state, opt_state = sched.state_dict(), opt.state_dict()
    q = lt.zeros(2, requires_grad=True)
    opt2 = lt.optim.SGD([q], lr=0.05)
    opt2.load_state_dict(opt_state)
    sched2 = make(opt2, last_epoch=4)  # initial_lr came with the optimizer's groups
    sched2.load_state_dict(state)
    got = []
    for _ in range(3):
        got.append(opt2.param_groups[0]["lr"])
        sched2.step()
    np.testing.assert_allclose(got, full[5:8, 0], rtol=1e-12)


def test_a_schedule_never_recompiles_the_step():
    w = lt.tensor([1.0, -2.0], requires_grad=True)
    opt = lt.optim.SGD([w], lr=0.1)
    sched = S.ExponentialLR(opt, gamma=0.5)

    @lt.compile(name="sched_step")
    def step():
        (w * w).sum().backward()
        opt.step()
        opt.zero_grad()

    ref = np.array([1.0, -2.0])
    for e in range(5):
        step()
        if e == 2:  # the graphs of the first calls made
            compiles = lt.metrics.counter_value("CompileCount")
        ref = ref - 0.1 * 0.5**e * 2 * ref
        sched.step()
    assert lt.metrics.counter_value("CompileCount") == compiles
    np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-6)


def test_schedule_mistakes_are_errors():
    p = lt.zeros(2, requires_grad=True)
    opt = lt.optim.SGD([p], lr=0.1)
    with pytest.raises(TypeError, match=r"StepLR.*optimizer must be a lazytrace.optim"):
        S.StepLR(object(), step_size=2)
    with pytest.raises(ValueError, match=r"StepLR.*step_size must be a positive int"):
        S.StepLR(opt, step_size=0)
    with pytest.raises(KeyError, match=r"initial_lr"):
        S.StepLR(lt.optim.SGD([p], lr=0.1), step_size=2, last_epoch=3)
    with pytest.raises(ValueError, match=r"LambdaLR.*expected 1 lr_lambdas"):
        S.LambdaLR(opt, [lambda e: 1.0, lambda e: 1.0])
    with pytest.raises(ValueError, match=r"SequentialLR.*expects 1 milestones"):
        S.SequentialLR(opt, [S.ConstantLR(opt), S.ConstantLR(opt)], milestones=[])


def test_optimizer_zero_grad_keeps_zeroed_gradients_unless_set_to_none():
    """As torch: set_to_none=False fills each existing gradient with zeros (a missing one
    stays None); the default sets them to None."""
    w = lt.nn.Parameter(lt.tensor([1.0, 2.0]))
    unused = lt.nn.Parameter(lt.tensor([3.0]))
    opt = lt.optim.SGD([w, unused], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
    assert unused.grad is None
    (w * 3).sum().backward()  # accumulates onto the zeros
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])
    opt.zero_grad()
    assert w.grad is None


@pytest.mark.parametrize("Opt", [lt.optim.SGD, lt.optim.AdamW])
def test_a_parameter_in_two_groups_is_refused(Opt):
    p = lt.nn.Parameter(lt.ones(2))
    with pytest.raises(ValueError, match="more than one parameter group"):
        Opt([{"params": [p]}, {"params": [p], "lr": 0.5}], lr=1.0)


def test_optimizer_state_by_parameter_and_a_saved_state_without_some_parameters():
    m = lt.nn.Linear(3, 2)
    opt = lt.optim.AdamW(m.parameters(), lr=0.1)
    m(lt.ones(1, 3)).sum().backward()
    opt.step()
    assert sorted(opt.state[m.weight]) == ["exp_avg", "exp_avg_sq", "step"]
    assert opt.state[m.weight]["step"].item() == 1.0
    g = np.ones((2, 3), np.float32)  # d(sum(W x + b))/dW for x = ones
    np.testing.assert_allclose(opt.state[m.weight]["exp_avg"].numpy(), 0.1 * g, rtol=1e-6)
    sd = opt.state_dict()
    del sd["state"][1]  # torch leaves out parameters that never stepped
    opt.load_state_dict(sd)
    assert opt.state[m.bias]["exp_avg"].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(opt.state[m.weight]["exp_avg"].numpy(), 0.1 * g, rtol=1e-6)
