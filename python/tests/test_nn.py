"""nn.Module, the layers, functional, functional_call, optimizers and safetensors, against
NumPy references."""

import math

import numpy as np
import pytest

import lazytrace as lt
from lazytrace import nn
from lazytrace.nn import functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2, bias=False)
        self.norm = nn.LayerNorm(8)
        self.register_buffer("scale", lt.tensor([2.0]))
        self.register_buffer("tmp", lt.zeros(1), persistent=False)

    def forward(self, x):
        return self.fc2(F.relu(self.norm(self.fc1(x)))) * self.scale


def test_module_registration_and_dotted_names():
    m = nn.Sequential(Block(), nn.ReLU())
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.fc1.weight", "0.fc1.bias", "0.fc2.weight", "0.norm.weight", "0.norm.bias"]
    assert [n for n, _ in m.named_buffers()] == ["0.scale", "0.tmp"]
    assert set(m.state_dict()) == set(names) | {"0.scale"}
    assert [n for n, _ in m.named_modules()] == ["", "0", "0.fc1", "0.fc2", "0.norm", "1"]
    assert len(list(m.children())) == 2
    assert all(p.requires_grad for p in m.parameters())
    assert isinstance(m[0].fc1.weight, nn.Parameter) and m[0].fc1.weight.shape == (8, 4)
    assert m[0].fc2.bias is None
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m[0].fc1.weight = lt.ones(8, 4)



def test_attributes_follow_every_change_of_the_registries():
    # parameters and submodules are plain attribute reads in forward; whatever way the
    # registries change, the attribute must say the same as the registry
    import copy

    m = nn.Linear(2, 3)
    w = nn.Parameter(lt.ones(3, 2))
    m._parameters["weight"] = w  # as torch.func and parametrizations do
    assert m.weight is w
    m._parameters.update(bias=None)
    assert m.bias is None
    m._parameters.pop("bias")
    assert not hasattr(m, "bias")
    del m.weight
    assert not hasattr(m, "weight") and "weight" not in m._parameters
    m.weight = nn.Parameter(lt.zeros(3, 2))
    with pytest.raises(KeyError, match="already exists"):  # as torch: remove it first
        m.register_buffer("weight", lt.full((1,), 5.0))
    del m.weight
    m.register_buffer("weight", lt.full((1,), 5.0))  # a buffer now, not a parameter
    assert m.weight.tolist() == [5.0] and "weight" not in m._parameters
    m._buffers.clear()
    assert not hasattr(m, "weight")
    # a submodule named like a method never hides the method (torch's ModuleDict.items)
    d = nn.ModuleDict({"items": nn.Linear(1, 1), "a": nn.Linear(1, 2)})
    assert callable(d.items) and [k for k, _ in d.items()] == ["items", "a"]
    assert d["items"].out_features == 1 and d.a.out_features == 2
    # a deep copy's attributes are its own registries' entries
    b = Block()
    c = copy.deepcopy(b)
    assert c.fc1 is c._modules["fc1"] and c.fc1 is not b.fc1
    c.fc1._parameters["bias"] = nn.Parameter(lt.zeros(8))
    assert c.fc1.bias.tolist() == [0.0] * 8 and b.fc1.bias is not c.fc1.bias
    assert "OrderedDict" in repr(b._modules)

def test_linear_matches_numpy_and_torch_init_bounds():
    lin = nn.Linear(16, 3)
    w = lin.weight.detach().numpy()
    assert np.abs(w).max() <= 1 / math.sqrt(16) and np.abs(w).max() > 0.5 / math.sqrt(16)
    x = np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32)
    want = x @ w.T + lin.bias.detach().numpy()
    np.testing.assert_allclose(lin(lt.tensor(x)).detach().numpy(), want, rtol=1e-5, atol=1e-6)


def test_norms_embedding_attention_match_numpy():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 8))
    t = lt.tensor(x, dtype=lt.float64)
    ln = nn.LayerNorm(8).double()
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(t).detach().numpy(), want, rtol=1e-10)
    no_affine = nn.LayerNorm(8, elementwise_affine=False).double()
    assert list(no_affine.parameters()) == []
    np.testing.assert_allclose(no_affine(t).numpy(), want, rtol=1e-10)
    rms = nn.RMSNorm(8, eps=1e-6).double()
    np.testing.assert_allclose(rms(t).detach().numpy(),
                               x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), rtol=1e-10)
    emb = nn.Embedding(10, 4)
    idx = np.array([[1, 9], [0, 1]])
    np.testing.assert_array_equal(emb(lt.tensor(idx)).detach().numpy(), emb.weight.detach().numpy()[idx])
    q, k, v = (rng.normal(size=(2, 2, 5, 4)) for _ in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / 2.0
    s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    got = F.scaled_dot_product_attention(*(lt.tensor(a, dtype=lt.float64) for a in (q, k, v)),
                                         is_causal=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


def test_embedding_checks_indices_and_padding_idx_passes_no_gradient():
    emb = nn.Embedding(5, 3)
    for bad in (-1, 5):
        with pytest.raises(ValueError, match=rf"\[Embedding\] index {bad} at position 1 is out of "
                                             r"range for 5 embeddings"):
            emb(lt.tensor(np.array([0, bad])))
    data = lt.tensor(np.array([1, 4, 9]))
    with pytest.raises(ValueError, match=r"index 9 at position 1 is out of range"):
        emb(data[1:]).detach().numpy()
    with pytest.raises(ValueError, match=r"\[Embedding\] padding_idx 5 must be an int in \[-5, 5\)"):
        nn.Embedding(5, 3, padding_idx=5)
    # torch: the padding row starts at zero, is picked like any row, and gets no gradient
    pad = nn.Embedding(5, 3, padding_idx=-2)
    assert pad.padding_idx == 3
    w = pad.weight.detach().numpy()
    np.testing.assert_array_equal(w[3], 0.0)
    with lt.no_grad():
        pad.weight.copy_(lt.tensor(w + 1.0))
    idx = np.array([[3, 1], [3, 3]])
    r = np.random.default_rng(4).normal(size=(2, 2, 3)).astype(np.float32)
    out = pad(lt.tensor(idx))
    np.testing.assert_array_equal(out.detach().numpy(), (w + 1.0)[idx])
    (out * lt.tensor(r)).sum().backward()
    want = np.zeros((5, 3), np.float32)
    want[1] = r[0, 1]
    np.testing.assert_allclose(pad.weight.grad.numpy(), want, rtol=1e-6)


def test_losses_match_numpy():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 5))
    target = np.array([0, 4, 2, -100, 1, 3])
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    keep = target != -100
    nll = -lp[np.arange(6)[keep], target[keep]]
    t, y = lt.tensor(logits, dtype=lt.float64), lt.tensor(target)
    assert F.cross_entropy(t, y).item() == pytest.approx(nll.mean(), rel=1e-12)
    assert F.cross_entropy(t, y, reduction="sum").item() == pytest.approx(nll.sum(), rel=1e-12)
    assert F.cross_entropy(t, lt.tensor(np.where(keep, target, 7)), ignore_index=7).item() == \
        pytest.approx(nll.mean(), rel=1e-12)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    assert F.mse_loss(lt.tensor(a, dtype=lt.float64), lt.tensor(b, dtype=lt.float64)).item() == \
        pytest.approx(((a - b) ** 2).mean(), rel=1e-12)


def test_losses_of_masked_logits_are_not_nan():
    # a class masked with -inf (a vocabulary mask): torch's loss is finite; a one-hot product
    # would give -inf * 0 = NaN
    logits = np.array([[-np.inf, 0.0, 1.0], [2.0, 0.0, 1.0], [-np.inf, 3.0, 0.0]])
    target = np.array([2, 0, -100])
    lp = np.array([row - np.log(np.exp(row[np.isfinite(row)]).sum()) for row in logits])
    nll = np.array([-lp[0, 2], -lp[1, 0], 0.0])
    t, y = lt.tensor(logits, dtype=lt.float64), lt.tensor(target)
    assert F.cross_entropy(t, y).item() == pytest.approx(nll[:2].mean(), rel=1e-12)
    assert F.cross_entropy(t, y, reduction="sum").item() == pytest.approx(nll.sum(), rel=1e-12)
    np.testing.assert_allclose(F.cross_entropy(t, y, reduction="none").numpy(), nll, rtol=1e-12)
    np.testing.assert_allclose(F.nll_loss(F.log_softmax(t, -1), y, reduction="none").numpy(),
                               nll, rtol=1e-12)
    assert F.nll_loss(F.log_softmax(t, -1), y).item() == pytest.approx(nll[:2].mean(), rel=1e-12)
    # an ignored target inside [0, C) that picks the masked class counts for nothing either
    y0 = lt.tensor(np.array([2, 0, 0]))
    assert F.cross_entropy(t, y0, ignore_index=0).item() == pytest.approx(nll[0], rel=1e-12)
    # the gradient: softmax minus the one-hot target, 0 at the masked class
    x = lt.tensor(logits, dtype=lt.float64, requires_grad=True)
    F.cross_entropy(x, y).backward()
    p = np.exp(lp)
    want = (p - np.eye(3)[[2, 0, 0]]) / 2
    want[2] = 0.0
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match=r"\[nll_loss\] target 5 at position 0 is out of range"):
        F.nll_loss(t, lt.tensor(np.array([5, 0, 1])))
    with pytest.raises(ValueError, match=r"\[cross_entropy\] reduction must be"):
        F.cross_entropy(t, y, reduction="avg", label_smoothing=0.1)


def test_cross_entropy_checks_targets_still_to_be_computed():
    data = lt.tensor(np.array([[0, 1, 2, 7, 1]]))
    loss = F.cross_entropy(lt.zeros(4, 3), data[0, 1:])
    with pytest.raises(ValueError, match=r"\[cross_entropy\] target 7 at position 2 is out of "
                       r"range for 3 classes"):
        loss.item()
    assert F.cross_entropy(lt.zeros(3, 3), data[0, :3]).item() == pytest.approx(math.log(3))


def test_an_impossible_allocation_is_a_memory_error_naming_the_shape():
    huge = lt.zeros(1 << 20, 1 << 20, 1 << 10)  # 4 PiB of float32
    with pytest.raises(MemoryError, match=r"cannot allocate 4\.0 PiB .*float32\[1048576, 1048576, 1024\]"):
        huge.tolist()
    assert (lt.ones(3) * 2).tolist() == [2.0, 2.0, 2.0]


def test_dropout_train_and_eval():
    lt.manual_seed(0)
    d = nn.Dropout(0.25)
    x = lt.ones(10000)
    y = d(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02 and np.allclose(y[kept], 1 / 0.75)
    assert d.eval()(x).tolist() == x.tolist() and not d.training


def test_state_dict_round_trip_and_strict_errors():
    a, b = Block(), Block()
    b.load_state_dict(a.state_dict())
    x = lt.randn(3, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    sd = a.state_dict()
    del sd["fc1.bias"]
    with pytest.raises(RuntimeError, match="fc1.bias"):
        b.load_state_dict(sd)
    sd = a.state_dict()
    sd["fc1.weight"] = lt.zeros(3, 3)
    with pytest.raises(RuntimeError, match="size mismatch"):
        b.load_state_dict(sd)


def test_to_dtype_and_device():
    m = Block().to(lt.float64)
    assert all(p.dtype == lt.float64 for p in m.parameters())
    assert all(p.requires_grad for p in m.parameters())
    assert m.to("cpu") is m
    with pytest.raises(ValueError, match="cpu"):
        m.to("cuda:0")


def test_functional_call_replaces_and_restores():
    m = nn.Linear(3, 2)
    w = lt.ones(2, 3)
    b = lt.zeros(2)
    out = lt.func.functional_call(m, {"weight": w, "bias": b}, (lt.tensor([1.0, 2.0, 3.0]),))
    assert out.tolist() == [6.0, 6.0]
    assert m.weight.shape == (2, 3) and m.weight is not w  # restored
    out = lt.func.functional_call(m, ({"weight": w}, {}), lt.tensor([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(out.detach().numpy(), 3.0 + m.bias.detach().numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="names no parameter"):
        lt.func.functional_call(m, {"nope": w}, (lt.ones(3),))


def _numpy_adamw(p, grads, lr, b1, b2, eps, wd):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        p = p - lr * mh / (np.sqrt(vh) + eps)
    return p


def _quadratic_steps(opt_cls, steps, **kw):
    p0 = np.array([1.0, -2.0, 3.0])
    p = lt.tensor(p0, dtype=lt.float64, requires_grad=True)
    opt = opt_cls([p], **kw)
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (p * p * lt.tensor([1.0, 2.0, 3.0], dtype=lt.float64)).sum()
        loss.backward()
        grads.append(p.grad.numpy().copy())
        opt.step()
    return p0, p.detach().numpy(), grads


def test_adamw_matches_the_reference_update():
    p0, got, grads = _quadratic_steps(lt.optim.AdamW, 4, lr=0.1, weight_decay=0.05)
    np.testing.assert_allclose(got, _numpy_adamw(p0, grads, 0.1, 0.9, 0.999, 1e-8, 0.05), rtol=1e-10)


def test_sgd_momentum_matches_the_reference_update():
    p0, got, grads = _quadratic_steps(lt.optim.SGD, 3, lr=0.05, momentum=0.9, weight_decay=0.1)
    p, buf = p0.copy(), None
    for g in grads:
        g = g + 0.1 * p
        buf = g if buf is None else 0.9 * buf + g
        p = p - 0.05 * buf
    np.testing.assert_allclose(got, p, rtol=1e-12)


def test_changing_lr_never_recompiles():
    model = nn.Linear(4, 1)
    opt = lt.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = lt.randn(8, 4), lt.randn(8, 1)
    compiles = []
    for step in range(6):
        opt.param_groups[0]["lr"] = 1e-2 / (step + 1)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        lt.sync()
        compiles.append(lt.metrics.counter_value("CompileCount"))
    assert compiles[-1] == compiles[2]  # the first two steps differ in state; then one graph
    opt.param_groups[0]["betas"] = (0.5, 0.5)
    with pytest.raises(ValueError, match="only 'lr'"):
        opt.step()


def test_safetensors_interchange_with_the_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    tensors = {"a": lt.tensor([[1.0, 2.0]]), "b": lt.arange(5), "c": lt.tensor([True, False]),
               "d": lt.tensor([0.5], dtype=lt.float16)}
    path = tmp_path / "x.safetensors"
    lt.save_file(tensors, path, metadata={"format": "pt"})
    loaded = st.load_file(str(path))
    assert loaded["a"].tolist() == [[1.0, 2.0]] and loaded["b"].dtype == np.int64
    assert loaded["c"].tolist() == [True, False] and loaded["d"].dtype == np.float16
    other = tmp_path / "y.safetensors"
    st.save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(other))
    back = lt.load_file(str(other))
    assert back["w"].shape == (2, 3) and back["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(FileNotFoundError):
        lt.load_file(str(tmp_path / "missing.safetensors"))


def test_pickle_round_trips_tensors_parameters_and_modules():
    import pickle

    rng = np.random.default_rng(3)
    values = rng.standard_normal((2, 3)).astype(np.float32)
    for t in (lt.tensor(values), lt.tensor(values).to(lt.bfloat16), lt.tensor(values).half(),
              lt.arange(6).reshape(2, 3), lt.tensor([[True, False, True]] * 2)):
        u = pickle.loads(pickle.dumps(t))
        assert type(u) is lt.Tensor and u.dtype == t.dtype and u.shape == t.shape
        assert u.float().tolist() == t.float().tolist()  # bfloat16 travels exactly
    p = pickle.loads(pickle.dumps(nn.Parameter(lt.tensor(values))))
    assert isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf
    np.testing.assert_array_equal(p.detach().numpy(), values)
    b = pickle.loads(pickle.dumps(nn.Buffer(lt.ones(1), persistent=False)))
    assert isinstance(b, nn.Buffer) and not b.persistent
    m = Block()
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.fc1.weight is m2._modules["fc1"]._parameters["weight"]
    x = lt.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    np.testing.assert_array_equal(m2(x).detach().numpy(), m(x).detach().numpy())
    assert [n for n, _ in m2.named_parameters()] == [n for n, _ in m.named_parameters()]


def test_integer_parameters_cannot_require_grad():
    with pytest.raises(ValueError, match=r"\[Parameter\] only floating-point.*i64\[2\]"):
        nn.Parameter(lt.tensor([1, 2]))
    p = nn.Parameter(lt.tensor([1, 2]), requires_grad=False)
    assert not p.requires_grad and p.tolist() == [1, 2]


def test_functional_call_takes_strict_positionally_as_the_contract_writes_it():
    lin = nn.Linear(2, 1)
    w = lt.tensor([[2.0, 3.0]])
    out = lt.func.functional_call(lin, {"weight": w, "bias": lt.zeros(1)}, (lt.ones(1, 2),), None,
                                  True)
    np.testing.assert_allclose(out.numpy(), [[5.0]])
    with pytest.raises(Exception, match="bias"):
        lt.func.functional_call(lin, {"weight": w}, (lt.ones(1, 2),), None, True)


def test_safetensors_paths_may_be_path_objects(tmp_path):
    path = tmp_path / "w.safetensors"
    lt.save_file({"a": lt.tensor([1.0, 2.0])}, path, metadata={"k": "v"})
    assert lt.load_file(path)["a"].tolist() == [1.0, 2.0]
    assert lt.load_metadata(path) == {"k": "v"}
    # a name that is not Unicode text (a lone surrogate) cannot be a safetensors name
    with pytest.raises(ValueError, match=r"\[save_file\] the name .* cannot be encoded as UTF-8"):
        lt.save_file({"\ud800": lt.ones(1)}, path)


def test_shape_mistakes_in_layers_name_the_layer():
    cases = [(lambda: nn.LayerNorm(4)(lt.ones(2, 5)), r"\[layer_norm\] normalized_shape \[4\]"),
             (lambda: nn.RMSNorm(4)(lt.ones(2, 5)), r"\[rms_norm\] normalized_shape \[4\]"),
             (lambda: F.mse_loss(lt.ones(3, 5), lt.ones(3, 4)), r"\[mse_loss\] input f32\[3, 5\]"),
             (lambda: nn.Linear(3, 2)(lt.ones(2, 4)), r"\[linear\] input f32\[2, 4\] has 4 features")]
    for f, message in cases:
        with pytest.raises(ValueError, match=message):
            f()
    # what broadcasts still works, as in torch
    np.testing.assert_allclose(F.mse_loss(lt.ones(3, 4), lt.zeros(4)).item(), 1.0)


def test_to_refuses_to_strand_an_optimizers_parameters():
    """Module.to gives the module new Parameter objects: an optimizer made before it would
    keep updating the old ones, so it raises, converting nothing; made after, it trains."""
    lin = nn.Linear(2, 1)
    opt = lt.optim.SGD(lin.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"\[Module.to\] parameter 'weight'.*optimizer"):
        lin.to(lt.float64)
    assert lin.weight.dtype == lt.float32 and lin.bias.dtype == lt.float32
    lin.to(lt.float32)  # no change: fine
    lin2 = nn.Linear(2, 1).to(lt.float64)
    opt = lt.optim.SGD(lin2.parameters(), lr=0.5)
    w0 = lin2.weight.detach().numpy().copy()
    lin2(lt.ones(1, 2, dtype=lt.float64)).sum().backward()
    opt.step()
    np.testing.assert_allclose(lin2.weight.detach().numpy(), w0 - 0.5)


@pytest.mark.parametrize("make", [
    lambda ps: lt.optim.AdamW(ps, lr=0.1, weight_decay=0.05),
    lambda ps: lt.optim.SGD(ps, lr=0.1, momentum=0.9),
])
def test_optimizer_state_dict_resumes_the_run_bit_for_bit(make):
    """torch's state_dict form, pickled and loaded into a new optimizer over copies of the
    weights after 3 steps: the next 2 steps are the first run's, under lt.compile too (traced
    before the load)."""
    import pickle

    rng = np.random.default_rng(7)
    w0 = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)]
    a = [lt.nn.Parameter(lt.tensor(w)) for w in w0]
    opt_a = make(a)

    def step(ps, opt, s):
        (lt.tanh(ps[0] * float(s + 1)) * ps[1]).sum().backward()
        opt.step()
        opt.zero_grad()

    for s in range(3):
        step(a, opt_a, s)
    sd = pickle.loads(pickle.dumps(opt_a.state_dict()))
    assert sorted(sd["state"]) == [0, 1] and sd["param_groups"][0]["params"] == [0, 1]
    assert float(sd["state"][1]["step"]) == 3.0
    b = [lt.nn.Parameter(lt.tensor(w)) for w in w0]
    opt_b = make(b)

    @lt.compile
    def compiled(scale):
        (lt.tanh(b[0] * scale) * b[1]).sum().backward()
        opt_b.step()
        opt_b.zero_grad()

    compiled(lt.tensor(9.0))
    opt_b.load_state_dict(sd)
    with lt.no_grad():
        for p, q in zip(b, a):
            p.copy_(q.detach().clone())
    for s in range(3, 5):
        step(a, opt_a, s)
        compiled(lt.tensor(float(s + 1)))
        for p, q in zip(b, a):
            np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    bad = opt_a.state_dict()
    bad["param_groups"][0]["params"] = [0]
    with pytest.raises(ValueError, match=r"group 0 has 1 parameters saved for 2"):
        opt_b.load_state_dict(bad)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_mean_of_many_float16_targets_counts_in_float32(label_smoothing):
    """70,000 targets: their count, and the losses' sum, exceed float16's 65,504."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((70000, 4)).astype(np.float16)
    target = rng.integers(0, 4, 70000)
    target[:100] = -100  # ignored
    z = logits.astype(np.float64)
    logp = z - z.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    keep = target != -100
    nll = -logp[np.arange(70000), np.where(keep, target, 0)]
    loss = (1 - label_smoothing) * nll - label_smoothing * logp.mean(1)
    want = loss[keep].mean()
    got = F.cross_entropy(lt.tensor(logits), lt.tensor(target), label_smoothing=label_smoothing)
    assert got.dtype == lt.float16
    np.testing.assert_allclose(float(got.float().item()), want, rtol=2e-3)
    if not label_smoothing:
        got = F.nll_loss(F.log_softmax(lt.tensor(logits).float(), -1).half(), lt.tensor(target))
        np.testing.assert_allclose(float(got.float().item()), want, rtol=2e-3)


def test_loss_and_attention_shape_errors_name_the_call():
    with pytest.raises(ValueError, match=r"\[l1_loss\] input f32\[3\] and target f32\[4\]"):
        F.l1_loss(lt.ones(3), lt.ones(4))
    q, k = lt.ones(1, 2, 3, 4), lt.ones(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"attn_mask bool\[3, 4\] must broadcast to the scores"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=lt.ones(3, 4, dtype=lt.bool))
    with pytest.raises(ValueError, match="enable_gqa=True"):
        F.scaled_dot_product_attention(lt.ones(1, 4, 3, 4), k, k)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=lt.ones(3, 3, dtype=lt.bool),
                                       is_causal=True)
    assert F.scaled_dot_product_attention(q, k, k, attn_mask=lt.ones(3, 5, dtype=lt.bool)).shape \
        == (1, 2, 3, 4)


def _np_weighted_ce(x, t, w, ignore, reduction, log_probs=False):
    """torch's class-weighted cross entropy (or nll of log-probabilities) in NumPy, [N, C]."""
    lp = x if log_probs else x - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - x.max(1, keepdims=True)
    keep = t != ignore
    tt = np.where(keep, t, 0)
    ww = np.where(keep, w[tt], 0.0)
    per = -lp[np.arange(len(t)), tt] * ww
    return {"none": per, "sum": per.sum(), "mean": per.sum() / ww.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_class_weighted_cross_entropy_and_nll_match_torchs_formula(reduction):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4))
    t = np.array([0, 3, 1, -100, 2, 3])
    w = np.array([0.5, 2.0, 1.0, 3.0])
    got = F.cross_entropy(lt.tensor(x), lt.tensor(t), weight=lt.tensor(w), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), _np_weighted_ce(x, t, w, -100, reduction), rtol=1e-12)
    lp = F.log_softmax(lt.tensor(x), 1)
    got = F.nll_loss(lp, lt.tensor(t), weight=lt.tensor(w), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), _np_weighted_ce(lp.numpy(), t, w, -100, reduction,
                                                            True), rtol=1e-12)
    # [N, C, d]: classes at dim 1
    x3 = rng.standard_normal((2, 4, 3))
    t3 = rng.integers(0, 4, (2, 3))
    got = F.cross_entropy(lt.tensor(x3), lt.tensor(t3), weight=lt.tensor(w), reduction=reduction)
    want = _np_weighted_ce(x3.transpose(0, 2, 1).reshape(6, 4), t3.reshape(6), w, -100, reduction)
    np.testing.assert_allclose(got.numpy(), want.reshape(2, 3) if reduction == "none" else want,
                               rtol=1e-12)


def test_class_losses_check_targets_and_weights():
    x = lt.ones(2, 4, 3)
    with pytest.raises(ValueError, match=r"target i64\[2, 4\] must have the shape of input "
                                         r"f32\[2, 4, 3\] without its class dim \(dim 1\): \[2, 3\]"):
        F.cross_entropy(x, lt.zeros(2, 4, dtype=lt.int64))
    with pytest.raises(ValueError, match=r"one weight per class \(\[4\]\)"):
        F.nll_loss(x, lt.zeros(2, 3, dtype=lt.int64), weight=lt.ones(3))
    with pytest.raises(ValueError, match="not supported"):
        F.cross_entropy(x, lt.zeros(2, 3, dtype=lt.int64), weight=lt.ones(4), label_smoothing=0.1)


def test_one_key_value_head_broadcasts_over_the_query_heads():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 8), (2, 1, 6, 8),
                                                                    (2, 1, 6, 8)))
    got = F.scaled_dot_product_attention(lt.tensor(q), lt.tensor(k), lt.tensor(v)).numpy()
    w = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    w = np.exp(w - w.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (w / w.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)
