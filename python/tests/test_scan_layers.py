"""lt.scan_layers against the for loop it replaces, NumPy float64 and finite differences.

The cases follow torch_xla's test/scan/test_scan_layers.py (no layers, ten nn.Linear(64, 64),
ten layers of tuples, a decoder model, layers with other parameter names or shapes), plus
what lazytrace promises beyond torch_xla: nn.ModuleList and custom modules with buffers,
weightless layers, is_layer_pure reuse, remat, tuple carries checked by finite differences,
and errors that name the layer and the parameter.
"""

import re

import numpy as np
import pytest

import lazytrace as lt
from reference import numeric_grads
from lazytrace import nn
from lazytrace.experimental.scan_layers import scan_layers

# ----------------------------------------------------------------------------------------------
# helpers


def arr(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def assert_rel_close(actual, expected, rtol=1e-4, what=""):
    """Close relative to the array's own scale: |a - e| <= rtol * (|e| + max|e|). A zero
    expected array is refused, so a vanished gradient cannot pass."""
    a = arr(actual) if isinstance(actual, lt.Tensor) else np.asarray(actual, np.float64)
    e = arr(expected) if isinstance(expected, lt.Tensor) else np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    scale = np.abs(e).max()
    assert scale > 0, f"{what}: the expected values are all zero"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale, err_msg=what)


def copy_weights(src, dst):
    """dst's parameters and buffers take src's values (fresh storage, not shared)."""
    dst.load_state_dict({k: lt.tensor(arr(v), dtype=v.dtype) for k, v in src.state_dict().items()})


def twin(make, n):
    """Two lists of n layers with equal weights: one for scan_layers, one for the loop."""
    a = [make() for _ in range(n)]
    b = [make() for _ in range(n)]
    for x, y in zip(a, b):
        copy_weights(x, y)
    return a, b


def loop(layers, h):
    for layer in layers:
        h = layer(*h) if isinstance(h, tuple) else layer(h)
    return h


def assert_grads_match(scan_layers_list, loop_layers_list, rtol=1e-4):
    checked = 0
    for i, (ls, ll) in enumerate(zip(scan_layers_list, loop_layers_list)):
        for (name, ps), (name2, pl) in zip(ls.named_parameters(), ll.named_parameters()):
            assert name == name2
            assert (ps.grad is None) == (pl.grad is None), f"layer {i} {name}"
            if pl.grad is not None:
                assert ps.grad is not pl.grad
                assert_rel_close(ps.grad, pl.grad, rtol, f"layer {i} {name}.grad")
                checked += 1
    assert checked > 0


class TanhLinear(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return lt.tanh(self.lin(x))


# ----------------------------------------------------------------------------------------------
# torch_xla's cases


def test_experimental_path_is_lt_scan_layers():
    assert scan_layers is lt.scan_layers


@pytest.mark.parametrize("layers", [[], nn.ModuleList([])], ids=["list", "ModuleList"])
def test_empty_layers(layers):
    input_data = lt.randn(64)
    output = scan_layers(layers, input_data.clone())
    np.testing.assert_array_equal(arr(output), arr(input_data))


def test_linear_layers():
    lt.manual_seed(42)
    layers_for_scan, layers_for_loop = twin(lambda: nn.Linear(64, 64), 10)
    input_data = lt.randn(64)
    lt.sync()

    output = scan_layers(layers_for_scan, input_data.clone())
    text = lt.debug.to_text(output)
    assert len(re.findall(r"= loop\(", text)) == 1  # one loop node, the layer not unrolled
    assert "matmul" not in text
    output.sum().backward()
    for layer in layers_for_scan:
        assert "loop(" in lt.debug.to_text(layer.weight.grad)

    loop_output = loop(layers_for_loop, input_data.clone())
    assert "matmul" in lt.debug.to_text(loop_output)  # so the check above means something
    assert loop_output is not output
    assert_rel_close(output, loop_output, 1e-5, "output")
    loop_output.sum().backward()
    assert_grads_match(layers_for_scan, layers_for_loop)

    # against NumPy float64: the forward and the backward of y = W h + b, ten times
    ws = [arr(l.weight) for l in layers_for_loop]
    bs = [arr(l.bias) for l in layers_for_loop]
    hs = [arr(input_data)]
    for w, b in zip(ws, bs):
        hs.append(w @ hs[-1] + b)
    assert_rel_close(output, hs[-1], 1e-4, "output vs numpy")
    g = np.ones(64)
    for k in range(9, -1, -1):
        assert_rel_close(layers_for_scan[k].weight.grad, np.outer(g, hs[k]), 1e-4, f"dW{k}")
        assert_rel_close(layers_for_scan[k].bias.grad, g, 1e-4, f"db{k}")
        g = ws[k].T @ g


def test_layers_against_finite_differences():
    """Four tanh(Linear(5, 5)) layers: every parameter's and the input's gradient."""
    lt.manual_seed(3)
    layers = [TanhLinear(5) for _ in range(4)]
    x = lt.randn(2, 5).requires_grad_(True)
    out = scan_layers(layers, x)
    (out * lt.tensor([[1.0, -2.0, 0.5, 3.0, 1.5]])).sum().backward()
    mix = np.array([[1.0, -2.0, 0.5, 3.0, 1.5]])
    params = [arr(p) for l in layers for p in (l.lin.weight, l.lin.bias)]

    def np_forward(x0, ps):
        h = x0
        for k in range(4):
            h = np.tanh(h @ ps[2 * k].T + ps[2 * k + 1])
        return h

    np.testing.assert_allclose(arr(out), np_forward(arr(x), params), rtol=1e-5, atol=1e-6)
    g = numeric_grads(lambda v: float((np_forward(v[0], v[1:]) * mix).sum()), [arr(x)] + params)
    np.testing.assert_allclose(x.grad.numpy(), g[0], rtol=1e-3, atol=1e-4)
    got = [p.grad.numpy() for l in layers for p in (l.lin.weight, l.lin.bias)]
    for k, (a, e) in enumerate(zip(got, g[1:])):
        np.testing.assert_allclose(a, e, rtol=1e-3, atol=1e-4, err_msg=f"parameter {k}")


class TupleModule(nn.Module):
    def __init__(self, n=64):
        super().__init__()
        self.linear = nn.Linear(n, n)
        self.w = nn.Parameter(lt.randn(n, n))

    def forward(self, x, y, z):
        return self.linear(x).sin(), self.linear(y).cos(), self.linear(z) @ self.w


def test_tuple_layers():
    lt.manual_seed(7)
    layers_for_scan, layers_for_loop = twin(TupleModule, 10)
    # the input a graph, not device data
    input_data = (lt.randn(64) * 100, lt.randn(64) * 200, lt.randn(64) * 300)
    a = lt.randn(64)
    input_data = tuple(t + a for t in input_data)

    output = scan_layers(layers_for_scan, input_data)
    assert isinstance(output, tuple) and len(output) == 3
    for o in output:
        assert "loop(" in lt.debug.to_text(o)
    output[0].sum().backward()

    loop_output = loop(layers_for_loop, input_data)
    for k in range(3):
        assert loop_output[k] is not output[k]
        assert_rel_close(output[k], loop_output[k], 1e-4, f"output[{k}]")
    loop_output[0].sum().backward()

    for i, (ls, ll) in enumerate(zip(layers_for_scan, layers_for_loop)):
        assert ls.linear.weight.grad is not ll.linear.weight.grad
        assert_rel_close(ls.linear.weight.grad, ll.linear.weight.grad, 1e-4, f"layer {i} weight")
        assert_rel_close(ls.linear.bias.grad, ll.linear.bias.grad, 1e-4, f"layer {i} bias")
        # w only reaches output[2]: no gradient from output[0] (None, or zeros from the stack)
        assert ll.w.grad is None
        assert ls.w.grad is None or not arr(ls.w.grad).any()


def test_tuple_carry_against_finite_differences():
    lt.manual_seed(11)
    layers = [TupleModule(3) for _ in range(3)]
    xyz = tuple(lt.randn(3).requires_grad_(True) for _ in range(3))
    out = scan_layers(layers, xyz)
    (out[0].sum() + 2.0 * out[1].sum() + 0.1 * out[2].sum()).backward()
    params = [arr(p) for l in layers for p in (l.linear.weight, l.linear.bias, l.w)]

    def np_forward(x, y, z, ps):
        for k in range(3):
            w, b, m = ps[3 * k: 3 * k + 3]
            x, y, z = np.sin(w @ x + b), np.cos(w @ y + b), (w @ z + b) @ m
        return x, y, z

    inputs = [arr(t) for t in xyz]
    ref = np_forward(*inputs, params)
    for k in range(3):
        np.testing.assert_allclose(arr(out[k]), ref[k], rtol=1e-5, atol=1e-5)

    def loss(v):
        x, y, z = np_forward(v[0], v[1], v[2], v[3:])
        return float(x.sum() + 2.0 * y.sum() + 0.1 * z.sum())

    g = numeric_grads(loss, inputs + params)
    for t, e in zip(xyz, g[:3]):
        np.testing.assert_allclose(t.grad.numpy(), e, rtol=1e-3, atol=1e-4)
    got = [p.grad.numpy() for l in layers for p in (l.linear.weight, l.linear.bias, l.w)]
    for k, (a_, e) in enumerate(zip(got, g[3:])):
        np.testing.assert_allclose(a_, e, rtol=1e-3, atol=1e-4, err_msg=f"parameter {k}")


def test_decoder_model():
    from lazytrace.models import Decoder, DecoderConfig

    lt.manual_seed(42)
    config = DecoderConfig(vocab=64, hidden=32, intermediate=8 * 32, heads=4, kv_heads=2,
                           layers=3, max_seq=16)
    loop_model = Decoder(config, layers_mode="loop")
    scan_model = Decoder(config, layers_mode="loop")
    copy_weights(loop_model, scan_model)
    input_ids = lt.tensor(np.random.default_rng(0).integers(0, config.vocab, size=(2, 8)))

    def forward_scan(model, ids):
        h = model.embed(ids)
        h = scan_layers(model.layers, h)
        return model.head(model.norm(h))

    loop_output = loop_model(input_ids)
    loop_output.sum().backward()
    scan_output = forward_scan(scan_model, input_ids)
    scan_output.sum().backward()
    assert "loop(" in lt.debug.to_text(scan_output)
    for layer in scan_model.layers:
        for _, p in layer.named_parameters():
            assert "loop(" in lt.debug.to_text(p.grad)
    assert_rel_close(scan_output, loop_output, 1e-4, "logits")
    assert_grads_match(scan_model.layers, loop_model.layers)
    assert_rel_close(scan_model.embed.weight.grad, loop_model.embed.weight.grad, 1e-4, "embed")


def test_heterogenous_layers():
    layer1 = nn.Linear(8, 8)
    layer2 = nn.Sequential(nn.Linear(8, 8))
    with pytest.raises(ValueError) as e:
        scan_layers([layer1, layer2], lt.zeros(8))
    msg = str(e.value)
    assert "layer 1" in msg and "Sequential" in msg
    assert "'0.weight'" in msg and "'weight'" in msg and "missing" in msg


def test_mismatched_shapes():
    layer1 = nn.Linear(128, 128)
    layer2 = nn.Linear(128, 129)
    with pytest.raises(ValueError) as e:
        scan_layers([layer1, layer2], lt.zeros(128))
    msg = str(e.value)
    assert "layer 1" in msg and "'weight'" in msg
    assert "f32[129, 128]" in msg and "f32[128, 128]" in msg


# ----------------------------------------------------------------------------------------------
# errors beyond torch_xla's


def test_mismatch_names_the_layer_index_and_the_parameter():
    layers = [nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4, bias=False)]
    with pytest.raises(ValueError) as e:
        scan_layers(layers, lt.zeros(4))
    msg = str(e.value)
    assert "layer 2" in msg and "'bias'" in msg and "missing" in msg


def test_mismatched_dtypes():
    layers = [nn.Linear(4, 4), nn.Linear(4, 4).double()]
    with pytest.raises(ValueError) as e:
        scan_layers(layers, lt.zeros(4))
    msg = str(e.value)
    assert "layer 1" in msg and "'weight'" in msg and "f64[4, 4]" in msg and "f32[4, 4]" in msg


class Scaled(nn.Module):
    def __init__(self, n, s, buf_shape=None):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.gain = nn.Parameter(lt.full((n,), 0.5))
        self.register_buffer("scale", lt.full(buf_shape or (n,), s))

    def forward(self, x):
        return lt.tanh(self.lin(x) * self.gain) * self.scale


def test_mismatched_buffer_names_the_buffer():
    layers = [Scaled(4, 1.0), Scaled(4, 2.0, buf_shape=(1,))]
    with pytest.raises(ValueError) as e:
        scan_layers(layers, lt.zeros(4))
    msg = str(e.value)
    assert "layer 1" in msg and "buffer" in msg and "'scale'" in msg and "f32[1]" in msg


def test_layer_changing_the_hidden_shape():
    with pytest.raises(ValueError) as e:
        scan_layers([nn.Linear(8, 4), nn.Linear(8, 4)], lt.zeros(8))
    msg = str(e.value)
    assert msg.startswith("[scan_layers]")
    assert "f32[8]" in msg and "f32[4]" in msg


def test_layer_returning_a_tuple_for_one_input():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x), x

    with pytest.raises(ValueError, match="tuple of 2"):
        scan_layers([Two(), Two()], lt.zeros(4))


# ----------------------------------------------------------------------------------------------
# beyond torch_xla


def test_module_list_of_custom_modules_with_buffers():
    lt.manual_seed(5)
    ml_scan = nn.ModuleList([Scaled(6, 1.0 + 0.25 * i) for i in range(5)])
    ml_loop = nn.ModuleList([Scaled(6, 0.0) for _ in range(5)])
    copy_weights(ml_scan, ml_loop)
    x0 = np.random.default_rng(1).normal(size=(3, 6))
    xs, xl = lt.tensor(x0, dtype=lt.float32, requires_grad=True), lt.tensor(x0, dtype=lt.float32, requires_grad=True)
    out = scan_layers(ml_scan, xs)
    ref = loop(ml_loop, xl)
    assert_rel_close(out, ref, 1e-5, "output")
    # NumPy: each layer's own buffer is used (scale 1.0, 1.25, ...)
    h = x0
    for l in ml_scan:
        h = np.tanh((h @ arr(l.lin.weight).T + arr(l.lin.bias)) * arr(l.gain)) * arr(l.scale)
    assert_rel_close(out, h, 1e-5, "output vs numpy")
    out.sum().backward()
    ref.sum().backward()
    assert_grads_match(ml_scan, ml_loop)
    assert_rel_close(xs.grad, xl.grad, 1e-4, "input grad")
    assert all(l.scale.grad is None for l in ml_scan)


class Wiggle(nn.Module):
    """No parameters, no buffers."""

    def forward(self, x):
        return lt.sin(x) * 1.5 + 0.25


@pytest.mark.parametrize("make", [nn.ReLU, nn.Tanh, Wiggle], ids=["ReLU", "Tanh", "custom"])
def test_weightless_layers(make):
    """torch_xla's scan_layers scans over the stacked weights and fails without any."""
    x0 = np.array([-1.5, -0.2, 0.3, 0.8, 2.0])
    x = lt.tensor(x0, dtype=lt.float32, requires_grad=True)
    xl = lt.tensor(x0, dtype=lt.float32, requires_grad=True)
    layers = [make() for _ in range(5)]
    out = scan_layers(layers, x)
    ref = loop(layers, xl)
    np.testing.assert_allclose(arr(out), arr(ref), rtol=1e-6, atol=1e-7)

    f = {nn.ReLU: lambda v: np.maximum(v, 0.0), nn.Tanh: np.tanh,
         Wiggle: lambda v: np.sin(v) * 1.5 + 0.25}[make]

    def np_forward(v):
        for _ in range(5):
            v = f(v)
        return v

    np.testing.assert_allclose(arr(out), np_forward(x0), rtol=1e-5, atol=1e-6)
    (out * lt.tensor([1.0, 2.0, 3.0, 4.0, 5.0])).sum().backward()
    g, = numeric_grads(lambda v: float((np_forward(v[0]) * np.arange(1.0, 6.0)).sum()), [x0])
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-3, atol=1e-4)


def test_weightless_layers_is_layer_pure_reuses_the_trace():
    layers = [Wiggle() for _ in range(4)]
    lt.metrics.clear_all()
    for _ in range(3):
        out = scan_layers(layers, lt.ones(3), is_layer_pure=True)
    np.testing.assert_allclose(out.numpy(), arr(loop(layers, lt.ones(3))), rtol=1e-6)
    assert lt.metrics.counter_value("LoopTrace") == 1
    assert lt.metrics.counter_value("LoopHit") == 2


def test_layers_of_different_classes():
    x = lt.tensor([-1.0, 0.5, 2.0])
    expected = arr(loop([nn.ReLU(), nn.SiLU()], x))
    try:
        out = scan_layers([nn.ReLU(), nn.SiLU()], x)
    except ValueError as e:
        assert "layer 1" in str(e)
        return
    np.testing.assert_allclose(arr(out), expected, rtol=1e-6)


def _counts():
    return (lt.metrics.counter_value("LoopTrace") or 0, lt.metrics.counter_value("LoopHit") or 0)


def test_is_layer_pure_reuses_the_trace_and_sees_new_weights():
    lt.manual_seed(9)
    layers, loop_layers = twin(lambda: TanhLinear(8), 4)
    opt = lt.optim.SGD([p for l in layers for p in l.parameters()], lr=0.1)
    loop_opt = lt.optim.SGD([p for l in loop_layers for p in l.parameters()], lr=0.1)
    x = lt.randn(2, 8)
    lt.metrics.clear_all()
    for step in range(3):
        out = scan_layers(layers, x, is_layer_pure=True)
        ref = loop(loop_layers, x)
        assert_rel_close(out, ref, 1e-5, f"step {step}")
        for o, op in ((out, opt), (ref, loop_opt)):
            op.zero_grad()
            (o * o).sum().backward()
            op.step()
        lt.sync()
    assert _counts() == (1, 2)
    assert_grads_match(layers, loop_layers)


def test_without_is_layer_pure_every_call_traces():
    layers = [TanhLinear(4) for _ in range(3)]
    x = lt.randn(4)
    lt.metrics.clear_all()
    for _ in range(3):
        out = scan_layers(layers, x)
    assert _counts() == (3, 0)
    assert_rel_close(out, loop(layers, x), 1e-6)


def test_remat_recompute_equals_save_and_the_loop():
    lt.manual_seed(13)
    make = lambda: Scaled(8, 0.9)  # noqa: E731
    results = {}
    ref_layers = [make() for _ in range(6)]
    x0 = np.random.default_rng(4).normal(size=(2, 8))
    for mode in ("save", "recompute", "loop"):
        layers = [make() for _ in range(6)]
        for a, b in zip(ref_layers, layers):
            copy_weights(a, b)
        x = lt.tensor(x0, dtype=lt.float32, requires_grad=True)
        out = loop(layers, x) if mode == "loop" else scan_layers(layers, x, remat=mode)
        (out * out).sum().backward()
        results[mode] = (out, x.grad, layers)
    for mode in ("save", "recompute"):
        out, xg, layers = results[mode]
        assert_rel_close(out, results["loop"][0], 1e-5, f"{mode} output")
        assert_rel_close(xg, results["loop"][1], 1e-4, f"{mode} input grad")
        assert_grads_match(layers, results["loop"][2])
    np.testing.assert_allclose(arr(results["save"][0]), arr(results["recompute"][0]), rtol=1e-6)
    for a, b in zip(results["save"][2], results["recompute"][2]):
        for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=n)


def test_frozen_parameters_get_no_gradient():
    lt.manual_seed(17)
    layers, loop_layers = twin(lambda: nn.Linear(4, 4), 3)
    for ls in (layers, loop_layers):
        ls[1].weight.requires_grad_(False)
    x = lt.randn(4)
    scan_layers(layers, x).sum().backward()
    loop(loop_layers, x).sum().backward()
    assert layers[1].weight.grad is None
    assert_grads_match(layers, loop_layers)


def test_random_ops_draw_per_layer():
    class Draw(nn.Module):
        def forward(self, a, b, c):
            return b, c, lt.rand(())

    z = lt.zeros(())
    out = scan_layers([Draw(), Draw(), Draw()], (z, z, z))
    vals = [t.item() for t in out]
    assert len(set(vals)) == 3
    assert all(0.0 <= v < 1.0 for v in vals)


def test_layers_deepcopy():
    import copy

    layers = [nn.Linear(4, 4) for _ in range(2)]
    copies = copy.deepcopy(layers)
    x = lt.randn(4)
    assert copies[0].weight is not layers[0].weight
    assert_rel_close(scan_layers(copies, x), loop(layers, x), 1e-6)


def test_the_alike_check_is_kept_between_calls_but_sees_changes():
    layers = lt.nn.ModuleList([lt.nn.LayerNorm(4) for _ in range(3)])
    x = lt.randn(2, 4)
    lt.scan_layers(layers, x)
    layers[1].eps = 1e-3
    with pytest.raises(ValueError, match=r"layer 1 differs from layer 0 in 'eps'"):
        lt.scan_layers(layers, x)
    layers[1].eps = layers[0].eps
    lt.scan_layers(layers, x)
    layers[2].eval()
    with pytest.raises(ValueError, match=r"layer 2 differs from layer 0 in 'training'"):
        lt.scan_layers(layers, x)


def test_a_compiled_scan_layers_sees_eval_after_an_eager_call():
    # the eager call leaves the alike check and the layer's body cached: the compiled
    # function's trace must still learn that it depends on the train()/eval() flags
    lt.manual_seed(0)
    layers = lt.nn.ModuleList([lt.nn.Sequential(lt.nn.Linear(4, 4), lt.nn.Dropout(0.5))
                               for _ in range(2)])
    x = lt.ones(16, 4)
    lt.scan_layers(layers, x, is_layer_pure=True)
    f = lt.compile(lambda x: lt.scan_layers(layers, x, is_layer_pure=True))
    f(x)
    layers.eval()
    expected = x
    for layer in layers:
        expected = layer(expected)
    np.testing.assert_allclose(f(x).detach().numpy(), expected.detach().numpy(), rtol=1e-6,
                               atol=1e-6)
