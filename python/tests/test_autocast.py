"""lazytrace.autocast: float32 products in bfloat16 (or float16) as torch.autocast("cpu"),
against NumPy with the operands rounded to bfloat16; gradients, losses, the trace caches'
keys, nn.Linear and a decoder's training under it."""

import numpy as np
import pytest

import lazytrace as lt
import lazytrace.nn.functional as F
from lazytrace.models import Decoder


def bf16(a):
    """float32 array rounded to the nearest bfloat16 (ties to even), as float64."""
    b = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def test_matmul_runs_in_bfloat16_against_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 5, 64)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32)
    with lt.autocast("cpu", dtype=lt.bfloat16):
        assert lt.is_autocast_enabled() and lt.get_autocast_dtype() == lt.bfloat16
        y = lt.tensor(x) @ lt.tensor(w).t()
    assert not lt.is_autocast_enabled()
    assert y.dtype == lt.bfloat16
    ref = bf16(x) @ bf16(w).T
    got = y.float().numpy()
    # the float64 product of the rounded operands, rounded once more to bfloat16
    np.testing.assert_allclose(got, ref, rtol=2 ** -8, atol=1e-5)
    # nn.Linear and F.linear go through the same products
    lin = lt.nn.Linear(64, 40)
    with lt.autocast("cpu"):
        out = lin(lt.tensor(x))
    assert out.dtype == lt.bfloat16
    wl, bl = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(out.detach().float().numpy(), bf16(x) @ bf16(wl).T + bf16(bl),
                               rtol=2 ** -7, atol=1e-2)


def test_elementwise_ops_float64_and_ints_are_left_alone():
    a = lt.ones(3, 3)
    with lt.autocast("cpu"):
        assert (a + a).dtype == lt.float32
        assert (lt.ones(3, 3, dtype=lt.float64) @ lt.ones(3, 3, dtype=lt.float64)).dtype == lt.float64
        assert (lt.ones(3, 3, dtype=lt.int64) @ lt.ones(3, 3, dtype=lt.int64)).dtype == lt.int64
    with lt.autocast("cpu", dtype=lt.float16):
        assert (a @ a).dtype == lt.float16
        np.testing.assert_array_equal((a @ a).float().numpy(), np.full((3, 3), 3.0))


def test_nesting_disabling_decorator_and_exceptions_restore_the_state():
    a = lt.ones(2, 2)
    ac = lt.autocast("cpu")
    with ac:
        with lt.autocast("cpu", enabled=False):
            assert not lt.is_autocast_enabled() and (a @ a).dtype == lt.float32
        with ac:  # one instance, entered twice
            assert (a @ a).dtype == lt.bfloat16
        assert (a @ a).dtype == lt.bfloat16
    assert not lt.is_autocast_enabled()
    with pytest.raises(ZeroDivisionError):
        with lt.autocast("cpu"):
            1 / 0
    assert not lt.is_autocast_enabled()

    @lt.autocast("cpu", dtype=lt.float16)
    def product(p, q):
        return p @ q

    assert product(a, a).dtype == lt.float16
    assert not lt.is_autocast_enabled()


def test_wrong_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"\[autocast\] lazytrace runs on the CPU"):
        lt.autocast("cuda")
    with pytest.raises(ValueError, match=r"\[autocast\] dtype must be bfloat16 or float16 .*float64"):
        lt.autocast("cpu", dtype=lt.float64)
    with pytest.raises(TypeError, match=r"\[autocast\] dtype must be"):
        lt.autocast("cpu", dtype="bfloat16")
    with pytest.raises(TypeError, match=r"\[autocast\] enabled must be a bool"):
        lt.autocast("cpu", enabled=1)


def test_gradients_reach_float32_parameters_in_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = lt.tensor(rng.standard_normal((16, 4)).astype(np.float32), requires_grad=True)
    with lt.autocast("cpu"):
        y = lt.tensor(x) @ w
    (y.float() * lt.arange(4.0)).sum().backward()  # backward outside, as torch users do
    assert w.grad.dtype == lt.float32
    ref = bf16(x).T @ np.broadcast_to(np.arange(4.0), (8, 4))
    np.testing.assert_allclose(w.grad.numpy(), ref, rtol=2 ** -8, atol=1e-6)


def test_losses_take_float32():
    rng = np.random.default_rng(2)
    logits = lt.tensor(rng.standard_normal((6, 5)).astype(np.float32)).to(lt.bfloat16)
    target = lt.tensor(np.array([0, 4, 2, 2, 1, 3]))
    want = F.cross_entropy(logits.float(), target).item()
    with lt.autocast("cpu"):
        for loss in (F.cross_entropy(logits, target), F.cross_entropy(logits, target, label_smoothing=0.1),
                     F.nll_loss(F.log_softmax(logits, -1), target), F.mse_loss(logits, logits * 0.5),
                     F.mse_loss(logits, logits, reduction="sum"), F.l1_loss(logits, logits * 2)):
            assert loss.dtype == lt.float32
        assert F.cross_entropy(logits, target).item() == want


def test_autocast_is_part_of_the_trace_caches_key():
    calls = []

    @lt.assume_pure
    def f(a, b):
        calls.append(1)
        return a @ b

    a, b = lt.ones(4, 4), lt.full((4, 4), 0.5)
    assert f(a, b).dtype == lt.float32
    with lt.autocast("cpu"):
        assert f(a, b).dtype == lt.bfloat16
        assert f(a, b).dtype == lt.bfloat16
    assert f(a, b).dtype == lt.float32
    assert len(calls) == 2

    step = lt.compile(lambda p, q: (p @ q).sum())
    assert step(a, b).dtype == lt.float32
    with lt.autocast("cpu"):
        assert step(a, b).dtype == lt.bfloat16
    np.testing.assert_allclose(step(a, b).item(), 32.0)


def test_a_decoder_trains_under_autocast_as_in_float32():
    def train(autocast, layers_mode):
        lt.manual_seed(0)
        model = Decoder(vocab=32, hidden=16, intermediate=32, heads=2, kv_heads=1, layers=2,
                        max_seq=8, layers_mode=layers_mode)
        opt = lt.optim.AdamW(model.parameters(), lr=0.02)
        tokens = lt.tensor(np.arange(18).reshape(2, 9) % 32)
        losses = []
        for _ in range(20):
            with lt.autocast("cpu", enabled=autocast):
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 32), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            lt.sync()
            losses.append(loss.item())
        assert all(p.dtype == lt.float32 for p in model.parameters())
        return np.array(losses)

    for mode in ("loop", "scan"):
        f32, mixed = train(False, mode), train(True, mode)
        np.testing.assert_allclose(mixed[0], f32[0], rtol=1e-2)
        np.testing.assert_allclose(mixed, f32, atol=0.05 * f32[0])
        assert mixed[-1] < 0.5 * mixed[0]


def test_a_compiled_functions_backward_runs_under_its_forwards_autocast():
    # the backward of lt.compile is traced when backward() first reaches it, after the block
    # (found in review: it was traced without autocast, and its gradients were wrong)
    rng = np.random.default_rng(4)
    xn = rng.standard_normal((4, 8)).astype(np.float32)
    wn = rng.standard_normal((8, 3)).astype(np.float32)
    grads = []
    for fn in (lambda x, w: x @ w, lt.compile(lambda x, w: x @ w)):
        x, w = lt.tensor(xn), lt.tensor(wn, requires_grad=True)
        with lt.autocast("cpu"):
            y = fn(x, w)
        assert y.dtype == lt.bfloat16
        y.float().sum().backward()
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    np.testing.assert_allclose(grads[0], np.broadcast_to(bf16(xn).sum(0)[:, None], (8, 3)),
                               rtol=2 ** -8)


def test_outer_is_not_a_product_for_autocast_and_cuda_is_never_on():
    a, b = lt.tensor([1.0, 3.0]), lt.tensor([1.0009765625, 1.0029296875])
    with lt.autocast("cpu"):
        o = lt.outer(a, b)
        assert not lt.is_autocast_enabled("cuda")
    assert o.dtype == lt.float32  # torch.outer is a multiply: exact, as without autocast
    np.testing.assert_array_equal(o.numpy(), np.outer(a.numpy(), b.numpy()))


def test_thread_ranks_and_threads_sharing_one_autocast_instance():
    import threading

    ac = lt.autocast("cpu")
    with ac:
        seen = {}
        lt.distributed.run_threads(2, lambda r: seen.__setitem__(r, lt.is_autocast_enabled()))
    assert seen == {0: True, 1: True}
    # one instance entered on two threads: each thread's block restores its own state
    states, ready = [], threading.Barrier(2)

    def worker():
        with ac:
            ready.wait()
        states.append(lt.is_autocast_enabled())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert states == [False, False] and not lt.is_autocast_enabled()
