"""The spec's examples, verbatim but for imports and device=, give the spec's results."""

import numpy as np

import lazytrace as torch
import lazytrace as torch_xla
from lazytrace import nn
from lazytrace.experimental.assume_pure import assume_pure
from lazytrace.experimental.scan import scan
from lazytrace.experimental.scan_layers import scan_layers
from lazytrace.func import functional_call
from lazytrace import while_loop


def test_assume_pure_do_math_traced_once_over_1000_calls():
    traced = 0

    @assume_pure
    def do_math(a, b, c=42):
        nonlocal traced
        traced += 1
        return a @ b + c

    x = torch.randn(3, 4, device="cpu")
    y = torch.randn(4, 2, device="cpu")
    for i in range(1000):
        result = do_math(x, y)
    assert traced == 1
    np.testing.assert_allclose(result.numpy(), x.numpy() @ y.numpy() + 42, rtol=1e-5)
    # the default applied: the keyword form shares the trace
    do_math(x, y, c=42)
    assert traced == 1
    do_math(x, y, c=7)
    assert traced == 2


def test_assume_pure_module_through_functional_call_traced_once():
    traced = 0

    class MyModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(10, 10)

        def forward(self, x):
            nonlocal traced
            traced += 1
            return self.linear(x)

    module = MyModule().to("cpu")
    pure_forward = lambda params, buffers, x: functional_call(module, (params, buffers), (x,))  # noqa: E731
    cached_forward = assume_pure(pure_forward)
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    for i in range(1000):
        x = torch.randn(5, 10, device="cpu")
        y = cached_forward(params, buffers, x)
    assert traced == 1
    w, b = module.linear.weight.detach().numpy(), module.linear.bias.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), x.numpy() @ w.T + b, rtol=1e-5, atol=1e-6)


def test_scan_cumsum():
    def cumsum(accumulated, element):
        accumulated += element
        return accumulated, accumulated

    init = torch.tensor([0.0], device="cpu")
    xs = torch.tensor([1.0, 2.0, 3.0], device="cpu")
    torch_xla.sync()
    final, result = scan(cumsum, init, xs)
    assert final.tolist() == [6.0]
    assert result.tolist() == [[1.0], [3.0], [6.0]]
    assert init.tolist() == [0.0]  # the carry is the body's, not init itself


def test_scan_pytree_running_mean():
    carry = {"sum": torch.tensor([0.0], device="cpu"), "count": torch.tensor([0.0], device="cpu")}
    xs = {"values": torch.arange(1, 6, dtype=torch.float32, device="cpu")}

    def fn(carry_dict, x_dict):
        new_sum = carry_dict["sum"] + x_dict["values"]
        new_count = carry_dict["count"] + 1.0
        new_carry = {"sum": new_sum, "count": new_count}
        running_mean = new_sum / new_count
        return new_carry, running_mean

    final_carry, means = scan(fn, carry, xs)
    assert final_carry["sum"].tolist() == [15.0] and final_carry["count"].tolist() == [5.0]
    np.testing.assert_allclose(means.reshape(-1).numpy(), [1.0, 1.5, 2.0, 2.5, 3.0])


def test_while_loop_gives_13():
    def cond_fn(iteri, x):
        return iteri > 0

    def body_fn(iteri, x):
        return iteri - 1, torch.add(x, 1)

    init_val = torch.tensor(3, device="cpu")
    iteri = torch.tensor(10, device="cpu")
    _, res = while_loop(cond_fn, body_fn, (iteri, init_val))
    assert res.item() == 13 and res.shape == () and repr(res) == "tensor(13)"


def test_scan_layers_replaces_the_for_loop():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(6)])

        def loop(self, hidden_states):
            for layer in self.layers:
                hidden_states = layer(hidden_states)
            return hidden_states

        def run_decoder_layers(self, hidden_states):
            return scan_layers(self.layers, hidden_states, is_layer_pure=True)

    m = Model()
    h = torch.randn(3, 8)
    np.testing.assert_allclose(m.run_decoder_layers(h).detach().numpy(),
                               m.loop(h).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_the_examples_script_runs(capsys):
    import os
    import runpy

    repo = os.environ.get("LAZYTRACE_REPO", os.path.join(os.path.dirname(__file__), "..", ".."))
    runpy.run_path(os.path.join(repo, "examples", "python", "spec_examples.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "traced 1 time(s)" in out and "final tensor([6.])" in out
    assert "[[1.0], [3.0], [6.0]]" in out and "res = tensor(13)" in out
