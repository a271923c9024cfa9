"""The tracing tools misused or reused in ways an audit found silently wrong or badly
reported: scan_layers over layers whose settings differ, a traced function whose closed-over
Module was changed structurally, fori_loop's index dtype, argument checks naming the tool,
and assume_pure/compile on methods. Values are checked against eager runs, plain Python
loops and NumPy."""

import gc

import numpy as np
import pytest

import lazytrace as lt
from lazytrace import nn
from lazytrace.func import functional_call


def arr(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def count(name):
    return lt.metrics.counter_value(name) or 0


def loop(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def linear_np(lin, x):
    out = np.asarray(x, np.float64) @ arr(lin.weight).T
    return out + arr(lin.bias) if lin.bias is not None else out


# ---------------------------------------------------------------------------------------
# D2: scan_layers runs layer 0's forward with layer 0's settings on every layer


class ScaledLayer(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.w = nn.Parameter(lt.ones(2))
        self.scale = scale

    def forward(self, x):
        return x * self.w * self.scale


SETTINGS_FIX = "for l in layers: x = l(x)"


def test_scan_layers_refuses_layers_whose_python_attribute_differs():
    layers = nn.ModuleList([ScaledLayer(1.0), ScaledLayer(2.0), ScaledLayer(3.0)])
    with pytest.raises(ValueError) as e:
        lt.scan_layers(layers, lt.ones(2))
    msg = str(e.value)
    assert msg.startswith("[scan_layers] layer 1 ")
    assert "'scale'" in msg and "2.0 in layer 1" in msg and "1.0 in layer 0" in msg
    assert "make them alike" in msg and SETTINGS_FIX in msg
    # alike layers still run, as the loop does: 2 * 2 * 2
    alike = nn.ModuleList([ScaledLayer(2.0) for _ in range(3)])
    np.testing.assert_allclose(arr(lt.scan_layers(alike, lt.ones(2))), [8.0, 8.0])
    np.testing.assert_allclose(arr(loop(alike, lt.ones(2))), [8.0, 8.0])


def test_scan_layers_refuses_layer_norms_of_different_eps():
    layers = nn.ModuleList([nn.LayerNorm(4, eps=1e-5), nn.LayerNorm(4, eps=10.0)])
    with pytest.raises(ValueError) as e:
        lt.scan_layers(layers, lt.tensor([[1.0, 2.0, 3.0, 4.0]]))
    msg = str(e.value)
    assert msg.startswith("[scan_layers] layer 1 ") and "'eps'" in msg
    assert "10.0 in layer 1" in msg and "1e-05 in layer 0" in msg and SETTINGS_FIX in msg
    # the same eps: NumPy's layer norm, twice
    same = nn.ModuleList([nn.LayerNorm(4, eps=10.0), nn.LayerNorm(4, eps=10.0)])
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    ref = x
    for _ in range(2):
        ref = (ref - ref.mean(-1, keepdims=True)) / np.sqrt(ref.var(-1, keepdims=True) + 10.0)
    out = lt.scan_layers(same, lt.tensor(x, dtype=lt.float32))
    np.testing.assert_allclose(arr(out), ref, rtol=1e-5, atol=1e-6)


def test_scan_layers_refuses_a_layer_in_another_train_eval_mode():
    layers = nn.ModuleList([nn.Dropout(0.5), nn.Dropout(0.5)])
    layers[1].eval()
    with pytest.raises(ValueError) as e:
        lt.scan_layers(layers, lt.ones(100))
    msg = str(e.value)
    assert msg.startswith("[scan_layers] layer 1 ") and "'training'" in msg
    assert "False in layer 1" in msg and "True in layer 0" in msg and "eval()" in msg
    # a submodule's flag, by its path
    seq = [nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)) for _ in range(3)]
    seq[2][1].eval()
    with pytest.raises(ValueError, match=r"\[scan_layers\] layer 2 differs from layer 0 in "
                                         r"'1\.training': False in layer 2, True in layer 0"):
        lt.scan_layers(seq, lt.ones(2))
    # all in eval(): dropout is the identity, as in the loop
    layers[0].eval()
    np.testing.assert_array_equal(arr(lt.scan_layers(layers, lt.ones(100))), np.ones(100))


def test_scan_layers_refuses_weightless_submodules_of_different_classes():
    layers = [nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Sequential(nn.Linear(2, 2), nn.Tanh())]
    with pytest.raises(ValueError) as e:
        lt.scan_layers(layers, lt.ones(2))
    msg = str(e.value)
    assert msg.startswith("[scan_layers] layer 1's submodule '1' is a Tanh but layer 0's is a ReLU")
    assert SETTINGS_FIX in msg


class Masked(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.mask = mask  # a plain attribute, not a buffer

    def forward(self, x):
        return self.lin(x) * self.mask


def test_scan_layers_values_not_comparable_differ_unless_the_same_object():
    a, b = lt.tensor([1.0, 0.0, 1.0]), lt.tensor([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"layer 1 differs from layer 0 in 'mask': a tensor "
                                         r"f32\[3\] \(not a parameter or buffer\)"):
        lt.scan_layers([Masked(a), Masked(b)], lt.ones(3))
    n1, n2 = np.ones(3), np.ones(3)
    with pytest.raises(ValueError, match="'mask'"):
        lt.scan_layers([Masked(n1), Masked(n2)], lt.ones(3))
    # the same object: alike, and the result is the loop's (NumPy)
    layers = [Masked(a), Masked(a)]
    h = np.ones(3)
    for l in layers:
        h = linear_np(l.lin, h) * np.array([1.0, 0.0, 1.0])
    np.testing.assert_allclose(arr(lt.scan_layers(layers, lt.ones(3))), h, rtol=1e-5, atol=1e-6)


def test_scan_layers_is_layer_pure_traces_again_when_the_settings_change():
    layers = [ScaledLayer(1.0) for _ in range(3)]
    lt.metrics.clear_all()
    np.testing.assert_allclose(arr(lt.scan_layers(layers, lt.ones(2), is_layer_pure=True)), [1, 1])
    np.testing.assert_allclose(arr(lt.scan_layers(layers, lt.ones(2), is_layer_pure=True)), [1, 1])
    assert (count("LoopTrace"), count("LoopHit")) == (1, 1)
    for layer in layers:
        layer.scale = 3.0
    out = lt.scan_layers(layers, lt.ones(2), is_layer_pure=True)
    np.testing.assert_allclose(arr(out), arr(loop(layers, lt.ones(2))))
    np.testing.assert_allclose(arr(out), [27.0, 27.0])
    assert count("LoopTrace") == 2
    # a dict attribute changed in place is another setting too
    class DictScaled(ScaledLayer):
        def forward(self, x):
            return x * self.w * self.scale["s"]

    layers = [DictScaled({"s": 1.0}) for _ in range(2)]
    np.testing.assert_allclose(arr(lt.scan_layers(layers, lt.ones(2), is_layer_pure=True)), [1, 1])
    for layer in layers:
        layer.scale["s"] = 5.0
    np.testing.assert_allclose(arr(lt.scan_layers(layers, lt.ones(2), is_layer_pure=True)),
                               [25.0, 25.0])


def test_scan_layers_flag_types():
    with pytest.raises(TypeError, match=r"\[scan_layers\] is_layer_pure must be a bool"):
        lt.scan_layers([nn.ReLU()], lt.ones(2), is_layer_pure="yes")
    with pytest.raises(ValueError, match=r"\[scan_layers\] remat must be"):
        lt.scan_layers([nn.ReLU()], lt.ones(2), remat="never")


# ---------------------------------------------------------------------------------------
# D3: a closed-over Module changed structurally after the first trace


def make_linear(w, b=None):
    lin = nn.Linear(2, 2, bias=b is not None)
    with lt.no_grad():
        lin.weight.copy_(lt.tensor(w))
        if b is not None:
            lin.bias.copy_(lt.tensor(b))
    return lin


X = [1.0, 2.0]


@pytest.mark.parametrize("tool", ["assume_pure", "compile"])
def test_reassigned_parameter_is_seen(tool):
    m = make_linear([[1.0, 2.0], [3.0, 4.0]])
    wrap = getattr(lt, tool)
    f = wrap(lambda a: m(a))
    x = lt.tensor(X)
    np.testing.assert_allclose(arr(f(x)), [5.0, 11.0])
    m.weight = nn.Parameter(lt.tensor([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(arr(f(x)), arr(m(x)))  # eager
    np.testing.assert_allclose(arr(f(x)), [1.0, 2.0])


def test_deleted_and_reregistered_tensors_and_replaced_submodules_are_seen():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = make_linear([[1.0, 0.0], [0.0, 1.0]])
            self.register_buffer("shift", lt.tensor([10.0, 20.0]))
            self.extra = nn.Parameter(lt.tensor([1.0, 1.0]))

        def forward(self, x):
            out = self.lin(x) + self.shift
            return out * self.extra if self.extra is not None else out

    net = Net()
    f = lt.assume_pure(lambda a: net(a))
    x = lt.tensor(X)

    def expect():
        e = linear_np(net.lin, X) + arr(net.shift)
        return e * arr(net.extra) if net.extra is not None else e

    np.testing.assert_allclose(arr(f(x)), [11.0, 22.0])
    net.register_buffer("shift", lt.tensor([100.0, 200.0]))  # replaces the buffer
    np.testing.assert_allclose(arr(f(x)), expect())
    np.testing.assert_allclose(arr(f(x)), [101.0, 202.0])
    del net.extra
    net.extra = nn.Parameter(lt.tensor([2.0, 3.0]))
    np.testing.assert_allclose(arr(f(x)), [202.0, 606.0])
    net.lin = make_linear([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.5])  # another submodule
    np.testing.assert_allclose(arr(f(x)), expect())
    np.testing.assert_allclose(arr(f(x)), [2.0 * 102.5, 3.0 * 201.5])
    net.lin = nn.Sequential(make_linear([[2.0, 0.0], [0.0, 2.0]]), nn.ReLU())  # another class
    np.testing.assert_allclose(arr(f(x)), [2.0 * 102.0, 3.0 * 204.0])


def test_module_list_changes_are_seen():
    layers = nn.ModuleList([make_linear([[2.0, 0.0], [0.0, 2.0]])])
    f = lt.compile(lambda a: loop(layers, a))
    x = lt.tensor(X)
    np.testing.assert_allclose(arr(f(x)), [2.0, 4.0])
    layers.append(make_linear([[0.0, 1.0], [1.0, 0.0]]))
    np.testing.assert_allclose(arr(f(x)), [4.0, 2.0])
    layers.insert(0, make_linear([[1.0, 1.0], [0.0, 1.0]]))
    np.testing.assert_allclose(arr(f(x)), arr(loop(layers, x)))
    np.testing.assert_allclose(arr(f(x)), [4.0, 6.0])
    del layers[0]
    np.testing.assert_allclose(arr(f(x)), [4.0, 2.0])


def test_scan_is_fn_pure_sees_a_reassigned_parameter():
    m = make_linear([[0.5, 0.0], [0.0, 2.0]])

    def body(c, xi):
        return m(c) + xi, None

    def python_loop(w):
        c = np.ones(2)
        for _ in range(3):
            c = np.asarray(w) @ c + 1.0
        return c

    out, _ = lt.scan(body, lt.ones(2), lt.ones(3, 2), is_fn_pure=True)
    np.testing.assert_allclose(arr(out), python_loop([[0.5, 0.0], [0.0, 2.0]]))
    m.weight = nn.Parameter(lt.tensor([[1.0, 1.0], [0.0, 1.0]]))
    out, _ = lt.scan(body, lt.ones(2), lt.ones(3, 2), is_fn_pure=True)
    np.testing.assert_allclose(arr(out), python_loop([[1.0, 1.0], [0.0, 1.0]]))


def test_copy_into_a_parameter_is_seen_without_a_trace():
    m = make_linear([[1.0, 2.0], [3.0, 4.0]], [0.0, 0.0])
    f = lt.assume_pure(lambda a: m(a))
    x = lt.tensor(X)
    lt.metrics.clear_all()
    f(x)
    with lt.no_grad():
        m.weight.copy_(lt.tensor([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(arr(f(x)), [1.0, 2.0])
    m.weight = m.weight  # the same parameter again: no change
    m.train()  # nothing read it
    np.testing.assert_allclose(arr(f(x)), [1.0, 2.0])
    assert (count("AssumePureTrace"), count("AssumePureHit")) == (1, 2)


def test_building_modules_or_functional_call_costs_no_retrace():
    m = make_linear([[1.0, 2.0], [3.0, 4.0]], [0.5, -0.5])
    f = lt.assume_pure(lambda a: m(a))
    g = lt.assume_pure(lambda a: nn.Sequential(nn.ReLU(), nn.Identity())(a) * 2)
    x = lt.tensor(X)
    lt.metrics.clear_all()
    for _ in range(3):
        np.testing.assert_allclose(arr(f(x)), linear_np(m, X))
        np.testing.assert_allclose(arr(g(x)), [2.0, 4.0])
        nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # a new model, made and changed
        other = nn.Linear(2, 2)
        other.weight = nn.Parameter(lt.zeros(2, 2))
        functional_call(m, {"weight": lt.zeros(2, 2)}, (x,))  # swaps and restores
    assert (count("AssumePureTrace"), count("AssumePureHit")) == (2, 4)


def test_rebinding_a_variable_is_documented_as_not_seen():
    for tool in (lt.assume_pure, lt.compile):
        doc = " ".join(tool.__doc__.split())
        assert "Rebinding a Python global or closure variable" in doc and "not seen" in doc
        assert "as in JAX" in doc


# ---------------------------------------------------------------------------------------
# D6: fori_loop's i has the bounds' dtype


def i32(v):
    return lt.tensor(v, dtype=lt.int32)


def test_fori_loop_int32_tensor_bounds_give_an_int32_index():
    seen = []

    def body(i, v):
        seen.append(i.dtype)
        return v + i * i

    out = lt.fori_loop(i32(2), i32(6), body, i32(1))
    assert out.dtype == lt.int32 and seen == [lt.int32]
    assert out.item() == 1 + sum(i * i for i in range(2, 6))  # the Python loop
    # a Python int bound is weakly typed (as JAX's): int32 with an int32 tensor bound
    out = lt.fori_loop(0, i32(4), lambda i, v: v + i, i32(0))
    assert out.dtype == lt.int32 and out.item() == 6
    # int64 anywhere: an int64 index
    for lo, hi in ((lt.tensor(0), lt.tensor(4)), (i32(0), lt.tensor(4)), (0, lt.tensor(4))):
        seen.clear()
        out = lt.fori_loop(lo, hi, body, lt.tensor(0))
        assert seen == [lt.int64] and out.dtype == lt.int64 and out.item() == 14


def test_fori_loop_body_changing_the_dtype_names_fori_loop():
    with pytest.raises(ValueError) as e:
        lt.fori_loop(lt.tensor(0), lt.tensor(3), lambda i, v: v + i, i32(0))
    msg = str(e.value)
    assert msg.startswith("[fori_loop] body_fn must return a val of init_val's")
    assert "val i32[] became i64[]" in msg and "while_loop" not in msg


def test_fori_loop_bounds_beyond_int64():
    with pytest.raises(ValueError, match=r"^\[fori_loop\] upper = 1180591620717411303424 is "
                                         r"outside the int64 range"):
        lt.fori_loop(0, 2 ** 70, lambda i, v: v + 1, lt.tensor(0))
    with pytest.raises(ValueError, match=r"^\[fori_loop\] lower = .* int64 range"):
        lt.fori_loop(-(2 ** 64), lt.tensor(3), lambda i, v: v + 1, lt.tensor(0))
    with pytest.raises(ValueError, match=r"^\[fori_loop\] the range .* more than 2\*\*63 - 1"):
        lt.fori_loop(-(2 ** 63), 2 ** 63 - 1, lambda i, v: v + 1, lt.tensor(0))
    # the edges of int64 are fine
    big = 2 ** 63 - 3
    out = lt.fori_loop(big, big + 2, lambda i, v: v + (i - big), lt.tensor(0))
    assert out.item() == 1


# ---------------------------------------------------------------------------------------
# argument checks name the tool


def test_flags_of_the_wrong_type():
    fn, init, xs = (lambda c, x: (c + x, c)), lt.zeros(()), lt.ones(3)
    for name, value in (("reverse", "yes"), ("is_fn_pure", 1), ("reverse", None)):
        with pytest.raises(TypeError) as e:
            lt.scan(fn, init, xs, **{name: value})
        assert str(e.value).startswith(f"[scan] {name} must be a bool (True or False), got")
    with pytest.raises(TypeError, match=r"^\[scan\] remat must be \"save\" or \"recompute\", "
                                        r"got int 3"):
        lt.scan(fn, init, xs, remat=3)
    with pytest.raises(ValueError, match=r"^\[scan\] remat must be"):
        lt.scan(fn, init, xs, remat="sometimes")
    # NumPy's bools are bools
    carry, ys = lt.scan(fn, init, xs, reverse=np.bool_(True))
    assert carry.item() == 3.0 and arr(ys).tolist() == [0.0, 1.0, 2.0][::-1]


@pytest.mark.parametrize("call, tool, what", [
    (lambda: lt.scan(3, lt.zeros(()), lt.ones(3)), "scan", "fn"),
    (lambda: lt.compile(3), "compile", "fn"),
    (lambda: lt.assume_pure(3), "assume_pure", "fn"),
    (lambda: lt.while_loop(3, lambda v: (v,), (lt.ones(1),)), "while_loop", "cond_fn"),
    (lambda: lt.while_loop(lambda v: v.sum() < 3, "body", (lt.ones(1),)), "while_loop",
     "body_fn"),
    (lambda: lt.fori_loop(0, 2, 3, lt.ones(1)), "fori_loop", "body_fn"),
], ids=["scan", "compile", "assume_pure", "while_loop_cond", "while_loop_body", "fori_loop"])
def test_a_function_that_is_not_callable_is_refused_at_once(call, tool, what):
    with pytest.raises(TypeError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(f"[{tool}] {what} must be callable")
    assert msg.endswith("got int 3") or msg.endswith("got str 'body'")


def test_compile_options_are_checked():
    for bad in (-1, 0):
        with pytest.raises(ValueError, match=r"^\[compile\] max_different_graphs must be a "
                                             r"positive int .* got " + str(bad)):
            lt.compile(max_different_graphs=bad)
    with pytest.raises(TypeError, match=r"^\[compile\] max_different_graphs .* got float 1.5"):
        lt.compile(lambda x: x, max_different_graphs=1.5)
    with pytest.raises(TypeError, match=r"^\[compile\] full_graph must be a bool"):
        lt.compile(lambda x: x, full_graph="yes")
    with pytest.raises(TypeError, match=r"^\[assume_pure\] name must be a str"):
        lt.assume_pure(lambda x: x, name=3)


# ---------------------------------------------------------------------------------------
# assume_pure and compile on methods


class Holder:
    def __init__(self, k):
        self.k = lt.tensor(k)

    @lt.assume_pure
    def times(self, x, bias=0.0):
        return x * self.k + bias


def test_assume_pure_method_binds_self_per_instance():
    a, b = Holder([3.0, 4.0]), Holder([-1.0, 0.5])
    x = lt.tensor(X)
    lt.metrics.clear_all()
    for _ in range(2):
        np.testing.assert_allclose(arr(a.times(x)), [3.0, 8.0])
        np.testing.assert_allclose(arr(b.times(x)), [-1.0, 1.0])
    np.testing.assert_allclose(arr(a.times(x, bias=1.0)), [4.0, 9.0])
    np.testing.assert_allclose(arr(a.times(x=x)), [3.0, 8.0])
    assert count("AssumePureTrace") == 3  # a, b, a with another bias
    assert count("AssumePureHit") == 3
    with lt.no_grad():
        a.k.copy_(lt.tensor([10.0, 10.0]))  # closed over: lifted, read at each call
    np.testing.assert_allclose(arr(a.times(x)), [10.0, 20.0])


def test_a_dead_instance_traces_are_dropped_and_not_reused():
    traced = Holder.__dict__["times"]
    gc.collect()
    before = len(traced._instances)
    x = lt.tensor(X)
    for k in range(5):  # new instances, which may reuse a dead one's address
        h = Holder([float(k), 1.0])
        np.testing.assert_allclose(arr(h.times(x)), [float(k), 2.0])
        del h
        gc.collect()
    assert len(traced._instances) == before


class Net(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.lin = make_linear(w, b)
        self.drop = nn.Dropout(0.5)

    @lt.assume_pure
    def forward(self, x):
        return self.drop(self.lin(x)) * 2


class CompiledNet(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.lin = make_linear(w, b)

    @lt.compile
    def forward(self, x):
        return lt.tanh(self.lin(x))


def test_module_forward_under_assume_pure():
    net = Net([[1.0, 2.0], [3.0, 4.0]], [0.5, -0.5]).eval()
    x = lt.tensor(X)
    expected = linear_np(net.lin, X) * 2
    out = net(x)
    np.testing.assert_allclose(arr(out), expected)
    out.sum().backward()
    # d/dW sum(2 (W x + b)) = 2 x per row; d/db = 2
    np.testing.assert_allclose(net.lin.weight.grad.numpy(), [[2.0, 4.0], [2.0, 4.0]])
    np.testing.assert_allclose(net.lin.bias.grad.numpy(), [2.0, 2.0])
    net.lin = make_linear([[0.0, 1.0], [1.0, 0.0]], [0.0, 0.0])  # seen
    np.testing.assert_allclose(arr(net(x)), [4.0, 2.0])
    net.train()  # the flag it read flipped: traced again, dropout on
    y = arr(net(lt.ones(2000, 2)))
    assert 0.4 < (y == 0).mean() < 0.6
    np.testing.assert_allclose(y[y != 0], 4.0)  # kept values scaled by 1 / (1 - p), times 2


def test_module_forward_under_compile():
    w, b = [[0.5, -1.0], [0.25, 0.75]], [0.1, -0.2]
    net, other = CompiledNet(w, b), CompiledNet([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    x = lt.tensor(X)
    np.testing.assert_allclose(arr(net(x)), np.tanh(linear_np(net.lin, X)), rtol=1e-6)
    np.testing.assert_allclose(arr(other(x)), np.tanh([1.0, 2.0]), rtol=1e-6)
    np.testing.assert_allclose(arr(net(x)), np.tanh(linear_np(net.lin, X)), rtol=1e-6)


def test_method_of_an_object_without_weakrefs():
    class Slotted:
        __slots__ = ("k",)

        def __init__(self):
            self.k = lt.ones(1)

        @lt.assume_pure
        def f(self, x):
            return x * self.k

    with pytest.raises(TypeError, match=r"^\[assume_pure\] .* cannot be referenced weakly"):
        Slotted().f(lt.ones(1))


def test_static_method_under_the_decorator():
    class S:
        @staticmethod
        @lt.assume_pure
        def double(x):
            return x * 2

    np.testing.assert_allclose(arr(S().double(lt.tensor(X))), [2.0, 4.0])
    with pytest.raises(TypeError, match=r"^\[assume_pure\] got a staticmethod object: put "
                                        r"@staticmethod above @lt.assume_pure"):
        lt.assume_pure(staticmethod(lambda x: x))


def test_max_different_graphs_names_a_structural_change():
    m = make_linear([[1.0, 2.0], [3.0, 4.0]])
    f = lt.compile(lambda a: m(a), max_different_graphs=1)
    np.testing.assert_allclose(arr(f(lt.tensor(X))), [5.0, 11.0])
    m.weight = nn.Parameter(lt.ones(2, 2))
    with pytest.raises(RuntimeError) as e:
        f(lt.tensor(X))
    msg = str(e.value)
    assert msg.startswith("[compile] 'compiled' would produce graph 2 but max_different_graphs "
                          "is 1: an nn.Module parameter, buffer or submodule was replaced")
    assert "evicted" not in msg


def test_inserting_into_an_empty_module_list_retraces_a_pure_forward():
    class M(lt.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = lt.nn.ModuleList()

        @lt.assume_pure
        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    m, x = M(), lt.ones(2, 3)
    assert m(x).sum().item() == 6.0
    m.blocks.insert(0, lt.nn.Linear(3, 3))
    np.testing.assert_allclose(m(x).detach().numpy(), m.blocks[0](x).detach().numpy(), rtol=1e-6)


# Found by a review against PYTHON.md (2026-12-07): writes that were silently lost, in-place
# flags that were ignored, and arguments checked late or with the wrong words.

def test_scan_layers_refuses_a_layer_that_writes_its_buffer():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", lt.zeros(1))

        def forward(self, h):
            self.count.add_(1)
            return h + self.count

    layers = [Counting(), Counting()]
    for pure in (False, True):
        with pytest.raises(ValueError, match=r"\[scan_layers\] the body writes in place into "
                                             r"its x .*a layer's parameter or buffer"):
            lt.scan_layers(layers, lt.zeros(1), is_layer_pure=pure)
    assert [arr(layer.count)[0] for layer in layers] == [0.0, 0.0]
    assert arr(loop(layers, lt.zeros(1)))[0] == 2.0  # the eager loop: 0 + 1, then 1 + 1
    assert [arr(layer.count)[0] for layer in layers] == [1.0, 1.0]


def test_assume_pure_refuses_a_write_into_its_argument():
    @lt.assume_pure
    def bump(x):
        x += 1
        return x * 2

    a = lt.zeros(2)
    with pytest.raises(ValueError, match=r"writes in place into its tensor argument 0 "
                                         r"\(f32\[2\].*compile"):
        bump(a)
    assert arr(a).tolist() == [0.0, 0.0]

    @lt.compile
    def bump_compiled(x):
        x += 1
        return x * 2

    assert arr(bump_compiled(a)).tolist() == [2.0, 2.0]
    assert arr(a).tolist() == [1.0, 1.0]  # compile writes its arguments back


def _silu(x):
    return x / (1 + np.exp(-x.astype(np.float64)))


@pytest.mark.parametrize("make, want", [
    (lambda t: nn.functional.relu(t, inplace=True), lambda x: np.maximum(x, 0)),
    (lambda t: nn.ReLU(inplace=True)(t), lambda x: np.maximum(x, 0)),
    (lambda t: nn.functional.silu(t, inplace=True), _silu),
    (lambda t: nn.SiLU(inplace=True)(t), _silu),
    (lambda t: nn.functional.dropout(t, 1.0, training=True, inplace=True), np.zeros_like),
])
def test_inplace_true_writes_the_input(make, want):
    x = np.array([-1.5, 0.5, 2.0], dtype=np.float32)
    t = lt.tensor(x)
    held = t
    assert make(t) is t
    assert np.allclose(arr(held), want(x), rtol=1e-6, atol=1e-7)
    u = lt.tensor(x)
    assert nn.functional.relu(u) is not u and arr(u).tolist() == x.tolist()
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25, inplace=False)"


def test_a_held_grad_sees_later_accumulation():
    w = lt.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    g = w.grad
    (w * 3).sum().backward()
    assert arr(g).tolist() == [5.0, 7.0]  # 2w + 3, as torch accumulates in place
    assert arr(w.grad).tolist() == [5.0, 7.0]


def test_manual_seed_takes_any_64_bit_int_as_torch():
    lt.manual_seed(-1)
    a = arr(lt.rand(4))
    lt.manual_seed(2**64 - 1)
    assert arr(lt.rand(4)).tolist() == a.tolist()
    with pytest.raises(ValueError, match=r"\[manual_seed\] seed 18446744073709551616 is out"):
        lt.manual_seed(2**64)
    with pytest.raises(TypeError, match=r"\[manual_seed\] seed must be an int, got float"):
        lt.manual_seed(1.5)


def test_scan_layers_checks_its_layers_first():
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"got a single Linear: pass \[layer\]"):
        lt.scan_layers(lin, lt.zeros(2))
    with pytest.raises(TypeError, match=r"got NoneType None"):
        lt.scan_layers(None, lt.zeros(2))
    with pytest.raises(TypeError, match=r"layers\[1\] is a function, not an nn.Module"):
        lt.scan_layers([lin, lambda h: h], lt.zeros(2))
    seq = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    x = lt.randn(3, 2)
    assert np.allclose(arr(lt.scan_layers(seq, x)), arr(loop(seq, x)), rtol=1e-5, atol=1e-6)


def test_adamw_names_the_bad_setting():
    p = [lt.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match=r"\[AdamW\] betas\[0\] must be in \[0, 1\), got 1.5"):
        lt.optim.AdamW(p, betas=(1.5, 0.9))
    with pytest.raises(ValueError, match=r"\[AdamW\] eps must be >= 0, got -1"):
        lt.optim.AdamW(p, eps=-1.0)


def test_tree_unflatten_says_how_many_leaves():
    _, spec = lt.tree_flatten({"a": lt.zeros(1), "b": (lt.zeros(1), lt.zeros(1))})
    with pytest.raises(ValueError, match=r"the spec has 3 leaves, got 1"):
        lt.tree_unflatten(spec, [lt.zeros(1)])


@pytest.mark.parametrize("tool", [lt.assume_pure, lt.compile])
def test_an_output_made_under_no_grad_inside_does_not_require_grad(tool):
    w = lt.tensor([2.0], requires_grad=True)

    def f(x):
        with lt.no_grad():
            stopped = x * w
        return stopped, x * w

    g = tool(f)
    for _ in range(2):  # traced, then replayed
        stopped, kept = g(lt.tensor([3.0]))
        assert not stopped.requires_grad and kept.requires_grad  # as in eager code
        assert arr(stopped).tolist() == [6.0] and arr(kept).tolist() == [6.0]
        with pytest.raises(RuntimeError, match=r"\[backward\]"):
            stopped.sum().backward()
        w.grad = None
        (kept * 5).sum().backward()
        assert arr(w.grad).tolist() == [15.0]
