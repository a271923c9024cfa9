"""Two Python threads training at once, and no leaks from traced functions."""

import gc
import threading

import numpy as np

import lazytrace as lt
from lazytrace import nn
from lazytrace.nn import functional as F


def _data(seed):
    rng = np.random.default_rng(seed)
    x = lt.tensor(rng.normal(size=(64, 16)).astype(np.float32))
    y = lt.tensor(rng.normal(size=(64, 1)).astype(np.float32))
    return x, y


def _train(start, seed, results, key):
    model = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 1))
    with lt.no_grad():
        for p, v in zip(model.parameters(), start):
            p.copy_(lt.tensor(v))
    opt = lt.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data(seed)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    results[key] = (losses, [p.detach().numpy() for p in model.parameters()])


def test_two_threads_train_two_models_as_one_thread_does():
    lt.manual_seed(5)
    start = [p.detach().numpy() for p in
             nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 1)).parameters()]
    results = {}
    _train(start, 1, results, "alone1")
    _train(start, 2, results, "alone2")
    threads = [threading.Thread(target=_train, args=(start, s, results, f"thread{s}"))
               for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in (1, 2):
        losses, params = results[f"thread{s}"]
        want_losses, want_params = results[f"alone{s}"]
        assert losses == want_losses and losses[-1] < losses[0]
        for got, want in zip(params, want_params):
            np.testing.assert_array_equal(got, want)


def test_dropped_assume_pure_functions_leave_nothing_behind():
    x = lt.randn(8, 8)
    w = lt.randn(8, 8)

    def make_and_call(i):
        f = lt.assume_pure(lambda a, k=i: (a @ w) * float(k % 3))
        y = f(x)
        lt.sync([y])
        return y.sum().item()

    for i in range(20):  # warm the caches and the allocator
        make_and_call(i)
    gc.collect()
    traces = lt._C.live_traces()
    mem = lt.metrics.memory_bytes()
    for i in range(1000):
        make_and_call(i)
    gc.collect()
    assert lt._C.live_traces() == traces
    assert lt.metrics.memory_bytes() <= mem + 4096


def test_a_cycle_through_a_traced_function_is_collected():
    import weakref

    class Holder:
        pass

    h = Holder()
    h.f = lt.assume_pure(lambda a: a * 2 + h.bias)
    h.bias = lt.ones(2)
    h.f(lt.ones(2))
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None
