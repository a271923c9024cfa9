"""lazytrace.distributed with threads as ranks: collectives against NumPy over what each rank
holds, their gradients, data-parallel training against one process that accumulates the same
examples' gradients, and the errors that replace hangs."""
import threading

import numpy as np
import pytest

import lazytrace as lt
import lazytrace.distributed as dist


def rank_values(r, n=6):
    return (0.1 * (r + 1) + 0.37 * np.arange(n) - 1.3 * r * (np.arange(n) % 3)).astype(np.float32)


def per_rank(n, fn):
    """fn(rank) on n thread ranks; their results by rank."""
    out = [None] * n
    lock = threading.Lock()

    def body(r):
        v = fn(r)
        with lock:
            out[r] = v

    dist.run_threads(n, body)
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_collectives_match_numpy(n):
    def body(r):
        x = lt.tensor(rank_values(r))
        return (lt.distributed.rank(), dist.world_size(), dist.all_reduce(x).numpy(),
                dist.all_reduce(x, "max").numpy(), dist.all_reduce(x, "mean").numpy(),
                dist.all_gather(x.reshape(2, 3)).numpy(),
                dist.reduce_scatter(lt.tensor(np.tile(rank_values(r), n))).numpy(),
                dist.broadcast(x, src=n - 1).numpy())

    stacked = np.stack([rank_values(r) for r in range(n)])
    total = stacked[0].copy()
    for r in range(1, n):
        total += stacked[r]  # in rank order, in float32, as the ranks reduce
    for r, (rank, size, s, mx, mean, gathered, scattered, bcast) in enumerate(per_rank(n, body)):
        assert (rank, size) == (r, n)
        np.testing.assert_array_equal(s, total)
        np.testing.assert_array_equal(mx, stacked.max(0))
        np.testing.assert_array_equal(mean, total * np.float32(1.0 / n))
        np.testing.assert_array_equal(gathered, stacked.reshape(2 * n, 3))
        np.testing.assert_array_equal(scattered, total)  # block r of the tiled sums
        np.testing.assert_array_equal(bcast, rank_values(n - 1))


def test_gradients_are_those_of_the_sum_of_the_ranks_losses():
    n = 2

    def body(r):
        w = lt.tensor(np.float32([1 + r, 2 + r, 3 + r, 4 + r]))
        x = lt.tensor(rank_values(r, 2)).requires_grad_()
        (w * dist.all_gather(x)).sum().backward()
        return x.grad.numpy()

    grads = per_rank(n, body)
    ws = [np.float32([1 + r, 2 + r, 3 + r, 4 + r]) for r in range(n)]
    for r in range(n):
        np.testing.assert_array_equal(grads[r], sum(w[2 * r:2 * r + 2] for w in ws))


def tiny_model():
    lt.manual_seed(7)
    return lt.nn.Sequential(lt.nn.Linear(6, 8), lt.nn.Tanh(), lt.nn.Linear(8, 3))


def batch(step):
    rng = np.random.default_rng(step)
    return rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8)


INIT = {k: v.numpy() for k, v in tiny_model().state_dict().items()}


def fresh_model():
    """tiny_model() with the same initial weights on every call, from any thread."""
    m = tiny_model()
    m.load_state_dict(INIT)  # (a state_dict() entry is a new tensor: copy_ into it is not seen)
    return m


def dp_step(ddp, opt, x, y):
    """One data-parallel AdamW/SGD step on this rank's rows of the global batch (x, y)."""
    begin, end = dist.shard(8)
    loss = lt.nn.functional.cross_entropy(ddp(lt.tensor(x[begin:end])), lt.tensor(y[begin:end]))
    loss.backward()
    ddp.reduce_gradients()
    opt.step()
    ddp.gather_parameters()
    opt.zero_grad()
    return loss


def dp_train(n, steps=3, batch_of=batch, **options):
    """Every rank's weights after data-parallel steps on n thread ranks, and the gradient
    buckets (parameter names) of rank 0's last step."""
    buckets = []

    def body(r):
        model = fresh_model()
        ddp = dist.DataParallel(model, **{"bucket_cap_mb": 0.0002, **options})
        opt = lt.optim.AdamW(ddp.parameters(), lr=0.05)
        for s in range(steps):
            dp_step(ddp, opt, *batch_of(s))
            lt.sync()
        if r == 0:
            buckets.append(ddp.buckets)
        return {k: v.numpy() for k, v in model.state_dict().items()}

    return per_rank(n, body), buckets[0]


def test_two_ranks_train_like_gradient_accumulation_bit_for_bit():
    steps = 4
    # one process: each step's gradient summed over the two halves of the batch, halved
    ref = fresh_model()
    opt = lt.optim.AdamW(ref.parameters(), lr=0.05)
    ref_losses = []
    for s in range(steps):
        x, y = batch(0)  # one batch: the loss falls
        total = 0.0
        for half in (slice(0, 4), slice(4, 8)):
            loss = lt.nn.functional.cross_entropy(ref(lt.tensor(x[half])), lt.tensor(y[half]))
            loss.backward()
            total += loss.item()
        for p in ref.parameters():
            p.grad = p.grad * 0.5
        opt.step()
        opt.zero_grad()
        lt.sync()
        ref_losses.append(total)

    ranks, buckets = dp_train(2, steps, batch_of=lambda s: batch(0))
    assert len(buckets) > 1
    for weights in ranks:
        for k, v in ref.state_dict().items():
            np.testing.assert_array_equal(weights[k], v.numpy(), err_msg=k)
    assert ref_losses[-1] < ref_losses[0]


def to_bf16(a):
    """float32 values rounded to bfloat16's 8 bits (nearest, ties to even), as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("n,shard_optimizer", [(1, False), (2, False), (2, True)])
def test_gradients_reduced_in_bfloat16_are_each_ranks_rounded_and_their_mean_rounded(
        n, shard_optimizer):
    steps = 3
    # one process: each n-th of the batch's gradient rounded to bfloat16 (in NumPy), their
    # mean in float32 rounded again (one rank rounds alike)
    ref = fresh_model()
    opt = lt.optim.AdamW(ref.parameters(), lr=0.05)
    per = 8 // n
    for s in range(steps):
        x, y = batch(s)
        sums = None
        for part in range(n):
            rows = slice(part * per, part * per + per)
            lt.nn.functional.cross_entropy(ref(lt.tensor(x[rows])), lt.tensor(y[rows])).backward()
            grads = [to_bf16(p.grad.numpy()) for p in ref.parameters()]
            sums = grads if sums is None else [a + b for a, b in zip(sums, grads)]
            opt.zero_grad()
        for p, g in zip(ref.parameters(), sums):
            p.grad = lt.tensor(to_bf16(g if n == 1 else g * np.float32(1 / n)))
        opt.step()
        opt.zero_grad()
        lt.sync()
    ranks, _ = dp_train(n, steps, reduce_dtype=lt.bfloat16, shard_optimizer=shard_optimizer)
    plain, _ = dp_train(n, steps)
    for k, v in ref.state_dict().items():
        np.testing.assert_array_equal(ranks[0][k], v.numpy(), err_msg=k)
    assert any((plain[0][k] != v.numpy()).any() for k, v in ref.state_dict().items())


def test_reduce_dtype_must_be_floating():
    with pytest.raises(TypeError, match=r"\[DataParallel\] reduce_dtype must be a floating dtype"):
        dist.DataParallel(lt.nn.Linear(2, 2), reduce_dtype=lt.int32)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_sharded_optimizer_trains_exactly_like_the_replicated_one(n):
    # buckets of 0.0002 MiB (52 floats): the larger parameters alone; ZeRO-1's shards are
    # the all-reduce's buckets
    for cap in (0.0002, 0.01):
        replicated, buckets = dp_train(n, bucket_cap_mb=cap)
        sharded, sharded_buckets = dp_train(n, shard_optimizer=True, bucket_cap_mb=cap)
        if n > 1:
            assert sharded_buckets == buckets
        for k, v in replicated[0].items():
            np.testing.assert_array_equal(sharded[0][k], v, err_msg=f"{k}, {cap} MiB")


def train_range(n, first, last, start=None, **options):
    """Rank 0's weights, losses and whole optimizer state (DataParallel.optimizer_state) after
    steps [first, last) on n thread ranks, from `start` (weights and optimizer state, loaded
    with load_optimizer_state) or from the fresh model. Every rank gathers the same state."""
    def body(r):
        model = fresh_model()
        if start:
            model.load_state_dict(start[0])
        ddp = dist.DataParallel(model, bucket_cap_mb=0.0002, **options)
        opt = lt.optim.AdamW(ddp.parameters(), lr=0.05)
        if start:
            ddp.load_optimizer_state(opt, {name: {k: lt.tensor(v) for k, v in e.items()}
                                           for name, e in start[1].items()})
        losses = []
        for s in range(first, last):
            losses.append(ddp.average(dp_step(ddp, opt, *batch(s))).item())
        state = {name: {k: v.numpy() for k, v in e.items()}
                 for name, e in ddp.optimizer_state(opt).items()}
        return {k: v.numpy() for k, v in model.state_dict().items()}, state, losses

    results = per_rank(n, body)
    for other in results[1:]:
        assert_same_state(other[1], results[0][1])
    return results[0]


def assert_same_state(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert sorted(a[name]) == sorted(b[name]), name
        for k in a[name]:
            np.testing.assert_array_equal(a[name][k], b[name][k], err_msg=f"{name}.{k}")


def test_whole_optimizer_state_resumes_on_any_number_of_ranks_sharded_or_not():
    whole = train_range(2, 0, 4, shard_optimizer=True)
    half = train_range(2, 0, 2, shard_optimizer=True)
    # the shards' state gathered is the replicated optimizer's, bit for bit
    assert_same_state(half[1], train_range(2, 0, 2)[1])
    assert sorted(half[1]) == sorted(INIT) and half[1]["0.weight"]["step"] == 2
    # resumed as it was written, or replicated: the uninterrupted run exactly
    for options in ({"shard_optimizer": True}, {}):
        weights, state, losses = train_range(2, 2, 4, start=half[:2], **options)
        assert losses == whole[2][2:]
        for k, v in whole[0].items():
            np.testing.assert_array_equal(weights[k], v, err_msg=k)
        assert_same_state(state, whole[1])
    # on 4 ranks, or one process: the same steps, summed in another order
    for n, options in ((4, {"shard_optimizer": True}), (1, {})):
        weights, _, losses = train_range(n, 2, 4, start=half[:2], **options)
        np.testing.assert_allclose(losses, whole[2][2:], rtol=1e-5)
        for k, v in whole[0].items():
            np.testing.assert_allclose(weights[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


def test_optimizer_state_needs_the_optimizer_over_its_parameters_and_every_name():
    def body(r):
        model = fresh_model()
        ddp = dist.DataParallel(model, shard_optimizer=True)
        with pytest.raises(ValueError, match="not one of this DataParallel's shards"):
            ddp.optimizer_state(lt.optim.AdamW(model.parameters()))
        opt = lt.optim.AdamW(ddp.parameters())
        state = ddp.optimizer_state(opt)
        del state["0.bias"]
        with pytest.raises(ValueError, match="no state for parameter '0.bias'"):
            ddp.load_optimizer_state(opt, state)

    dist.run_threads(2, body)


@pytest.mark.parametrize("shard_optimizer", [False, True])
def test_clipping_the_reduced_gradients_clips_as_one_process(shard_optimizer):
    # one process on the whole batch, clipping by the whole gradient's norm; the ranks clip
    # the reduced gradients, ZeRO-1's by the norm of the parts all-reduced
    max_norm = 0.3
    ref = fresh_model()
    opt = lt.optim.AdamW(ref.parameters(), lr=0.05)
    ref_norms = []
    for s in range(3):
        x, y = batch(s)
        lt.nn.functional.cross_entropy(ref(lt.tensor(x)), lt.tensor(y)).backward()
        ref_norms.append(float(lt.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)))
        opt.step()
        opt.zero_grad()
    assert min(ref_norms) > max_norm  # every step clips

    def body(r):
        model = fresh_model()
        ddp = dist.DataParallel(model, bucket_cap_mb=0.0002, shard_optimizer=shard_optimizer)
        opt = lt.optim.AdamW(ddp.parameters(), lr=0.05)
        norms = []
        for s in range(3):
            x, y = batch(s)
            begin, end = dist.shard(8)
            lt.nn.functional.cross_entropy(ddp(lt.tensor(x[begin:end])),
                                           lt.tensor(y[begin:end])).backward()
            ddp.reduce_gradients()
            norms.append(float(ddp.clip_grad_norm_(max_norm)))
            opt.step()
            ddp.gather_parameters()
            opt.zero_grad()
        return norms, {k: v.numpy() for k, v in model.state_dict().items()}

    for norms, weights in per_rank(2, body):
        np.testing.assert_allclose(norms, ref_norms, rtol=1e-5)
        for k, v in ref.state_dict().items():
            np.testing.assert_allclose(weights[k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_ranks_issuing_different_collectives_raise_instead_of_hanging():
    def body(r):
        dist.all_reduce(lt.ones(4 if r == 0 else 5)).numpy()

    with pytest.raises(RuntimeError, match="issue different collectives"):
        dist.run_threads(2, body)


def test_mistakes_are_errors():
    def body(r):
        with pytest.raises(ValueError, match=r"\[reduce_scatter\] dim 0 of shape \[3\]"):
            dist.reduce_scatter(lt.ones(3))
        with pytest.raises(ValueError, match="unknown reduction 'prod'"):
            dist.all_reduce(lt.ones(2), "prod")
        with pytest.raises(ValueError, match="not differentiable"):
            dist.broadcast(lt.ones(2).requires_grad_())

    dist.run_threads(2, body)
    with pytest.raises(ValueError, match="boom"):  # the failing rank's own exception
        def fails(r):
            if r == 1:
                raise ValueError("boom")
            dist.all_reduce(lt.ones(2)).numpy()
        dist.run_threads(2, fails)
    for bad in (0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="bucket_cap_mb must be a positive finite number"):
            dist.DataParallel(lt.nn.Linear(2, 2), bucket_cap_mb=bad)


@pytest.mark.parametrize("shard_optimizer", [False, True])
def test_frozen_and_later_loaded_weights_train_as_one_process(shard_optimizer):
    """Weights loaded after DataParallel is made (a resumed run) are what the step updates,
    with ZeRO-1's shards too, and a frozen parameter stays as loaded; as one process on the
    whole batch (AdamW with weight decay, which would move the frozen one)."""
    x = (0.1 * ((5 * np.arange(8)[:, None] + 3 * np.arange(4)) % 7) - 0.3).astype(np.float32)
    loaded = {"0.weight": np.linspace(-0.3, 0.3, 12, dtype=np.float32).reshape(3, 4),
              "0.bias": np.array([0.1, -0.2, 0.3], np.float32),
              "2.weight": np.linspace(0.5, -0.5, 6, dtype=np.float32).reshape(2, 3),
              "2.bias": np.array([0.25, -0.75], np.float32)}

    def train(rows, ddp=None):
        lt.manual_seed(4)
        model = lt.nn.Sequential(lt.nn.Linear(4, 3), lt.nn.Tanh(), lt.nn.Linear(3, 2))
        model[2].bias.requires_grad_(False)
        if ddp is not None:
            ddp = dist.DataParallel(model, bucket_cap_mb=16 / 2**20, average=False,
                                    shard_optimizer=shard_optimizer)
        model.load_state_dict({k: lt.tensor(v) for k, v in loaded.items()})
        opt = lt.optim.AdamW(ddp.parameters() if ddp else model.parameters(), lr=0.1,
                             weight_decay=0.1)
        for _ in range(3):
            model(lt.tensor(x[rows])).sum().backward()
            if ddp:
                ddp.reduce_gradients()
            opt.step()
            if ddp:
                ddp.gather_parameters()
            opt.zero_grad()
        return {k: v.detach().numpy() for k, v in model.state_dict().items()}

    want = train(slice(0, 8))
    np.testing.assert_array_equal(want["2.bias"], loaded["2.bias"])
    got = per_rank(2, lambda r: train(slice(*dist.shard(8)), ddp=True))
    for name, w in want.items():
        np.testing.assert_allclose(got[0][name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_all_reduces_start_inside_the_scans_backward_with_the_same_bits():
    """The overlap_collectives pass starts each stacked gradient's all-reduce a layer at a time
    inside the backward loop of a scan over stacked weights, and the others as soon as their
    gradients exist: the same sums, so the same weights as with blocking collectives."""
    from lazytrace.models import Decoder, DecoderConfig

    config = DecoderConfig(vocab=16, hidden=8, intermediate=12, heads=2, kv_heads=1, layers=3,
                           max_seq=8)
    lt.manual_seed(11)
    init = {k: v.numpy() for k, v in Decoder(config, layers_mode="scan", stacked=True)
            .state_dict().items()}
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 16, (4, 5))

    def train(r):
        model = Decoder(config, layers_mode="scan", stacked=True)
        model.load_state_dict({k: lt.tensor(v) for k, v in init.items()})
        ddp = dist.DataParallel(model, bucket_cap_mb=0.0001)  # a bucket per gradient
        opt = lt.optim.AdamW(ddp.parameters(), lr=0.05)
        begin, end = dist.shard(4)
        for _ in range(3):
            x = lt.tensor(tokens[begin:end, :4])
            y = lt.tensor(tokens[begin:end, 1:])
            logits = ddp(x).reshape(-1, 16)
            lt.nn.functional.cross_entropy(logits, y.reshape(-1)).backward()
            ddp.reduce_gradients()
            opt.step()
            opt.zero_grad()
            lt.sync()
        return {k: v.numpy() for k, v in model.state_dict().items()}

    before = lt.metrics.counter_value("CollectivesInLoops") or 0
    overlapped = per_rank(2, train)
    assert (lt.metrics.counter_value("CollectivesInLoops") or 0) > before
    was = lt.debug.set_disabled_passes(["overlap_collectives"])
    try:
        blocking = per_rank(2, train)
    finally:
        lt.debug.set_disabled_passes(was)
    for r in range(2):
        for k in init:
            np.testing.assert_array_equal(overlapped[r][k], blocking[r][k], err_msg=k)
            np.testing.assert_array_equal(overlapped[r][k], overlapped[0][k], err_msg=k)
    assert any(not np.array_equal(overlapped[0][k], init[k]) for k in init)


def test_dropout_masks_an_example_as_one_process_would():
    """After distributed.shard, a rank's dropout mask of an example is the one a single
    process masking the whole global batch draws for it (the example's global index keys
    the random numbers, not the number of ranks)."""
    x = lt.tensor(np.arange(1, 25, dtype=np.float32).reshape(6, 4))
    lt.manual_seed(9)
    lt.set_batch_rows()
    whole = lt.nn.functional.dropout(x, 0.5).numpy()
    assert 0 < (whole == 0).sum() < whole.size
    lock = threading.Lock()  # the ranks share this process's generator

    def body(r):
        begin, end = dist.shard(6)
        with lock:
            lt.manual_seed(9)
            return begin, end, lt.nn.Dropout(0.5)(x[begin:end]).numpy()

    for n in (2, 3):
        for begin, end, mine in per_rank(n, body):
            np.testing.assert_array_equal(mine, whole[begin:end])


def test_a_sharded_state_with_frozen_parameters_loads_replicated_and_counts_must_agree():
    def body(r):
        model = fresh_model()
        model[0].bias.requires_grad_(False)
        ddp = dist.DataParallel(model, shard_optimizer=True, bucket_cap_mb=1)  # one bucket
        opt = lt.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        dp_step(ddp, opt, *batch(0))
        state = ddp.optimizer_state(opt)
        assert "0.bias" not in state
        plain = dist.DataParallel(model)
        opt2 = lt.optim.SGD(plain.parameters(), lr=0.05, momentum=0.9)
        plain.load_optimizer_state(opt2, state)  # the frozen bias starts anew
        got = opt2.state[model[0].weight]["momentum_buffer"].numpy()
        np.testing.assert_array_equal(got, state["0.weight"]["momentum_buffer"].numpy())
        state["2.weight"]["step"] = lt.tensor(0.0, dtype=lt.float64)  # never updated: fine
        ddp.load_optimizer_state(opt, state)
        assert opt.state[ddp.parameters()[0]]["step"].item() == 1.0
        state["2.weight"]["step"] = lt.tensor(5.0, dtype=lt.float64)
        with pytest.raises(ValueError, match="share a shard but were updated"):
            ddp.load_optimizer_state(opt, state)

    dist.run_threads(2, body)
