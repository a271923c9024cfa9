"""The Python decoder: its three ways of running layers agree, its gradients are right, and
it loads and runs what the C++ command line trained."""

import os
import subprocess

import numpy as np
import pytest

import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig, generate, load, save

SMALL = DecoderConfig(vocab=64, hidden=32, intermediate=64, heads=4, kv_heads=2, layers=3, max_seq=16)


def _step_grads(mode, remat="save", stacked=False):
    lt.manual_seed(11)
    model = Decoder(SMALL, layers_mode=mode, remat=remat, stacked=stacked).double()
    tokens = lt.tensor(np.arange(20).reshape(2, 10) % 64)
    logits = model(tokens)
    loss = lt.nn.functional.cross_entropy(logits[:, :-1].reshape(18, 64), tokens[:, 1:].reshape(18))
    loss.backward()
    if stacked:  # per-layer names, as the unstacked model has them
        grads = {}
        for n, p in model.named_parameters():
            for i in range(SMALL.layers) if n.startswith("layers.") else [None]:
                key = n if i is None else f"layers.{i}.{n[len('layers.'):]}"
                grads[key] = p.grad.numpy() if i is None else p.grad.numpy()[i]
        return logits.detach().numpy(), grads
    return logits.detach().numpy(), {n: p.grad.numpy() for n, p in model.named_parameters()}


def test_loop_assume_pure_and_scan_layers_agree_on_values_and_gradients():
    ref_logits, ref_grads = _step_grads("loop")
    for mode, remat, stacked in (("assume_pure", "save", False), ("scan", "save", False),
                                 ("scan", "recompute", False), ("scan", "save", True)):
        logits, grads = _step_grads(mode, remat, stacked)
        np.testing.assert_allclose(logits, ref_logits, rtol=1e-10, atol=1e-12)
        assert grads.keys() == ref_grads.keys()
        for name, g in grads.items():
            np.testing.assert_allclose(g, ref_grads[name], rtol=1e-8, atol=1e-12, err_msg=name)


def test_a_weight_gradient_against_a_finite_difference():
    lt.manual_seed(3)
    model = Decoder(SMALL, layers_mode="scan").double()
    tokens = lt.tensor([[1, 5, 9, 2, 7]])
    targets = lt.tensor([5, 9, 2, 7, 3])

    def loss_of(m):
        return lt.nn.functional.cross_entropy(m(tokens)[0], targets)

    loss_of(model).backward()
    w = model.layers[1].mlp.up_proj.weight
    got = w.grad.numpy()[3, 7]
    base = w.detach().numpy()
    eps = 1e-6
    vals = []
    for sign in (1, -1):
        pert = base.copy()
        pert[3, 7] += sign * eps
        with lt.no_grad():
            w.copy_(lt.tensor(pert))
        vals.append(loss_of(model).item())
    assert got == pytest.approx((vals[0] - vals[1]) / (2 * eps), rel=1e-5)


def test_save_and_load_round_trip(tmp_path):
    lt.manual_seed(0)
    model = Decoder(SMALL)
    save(model, tmp_path / "d.safetensors")
    again = load(tmp_path / "d.safetensors")
    tokens = lt.tensor([[3, 4, 5]])
    np.testing.assert_array_equal(again(tokens).detach().numpy(), model(tokens).detach().numpy())


@pytest.mark.skipif("LAZYTRACE_CLI" not in os.environ,
                    reason="needs the lazytrace command line (LAZYTRACE_CLI, set by make test)")
def test_loads_the_command_lines_weights_and_generates_its_text(tmp_path):
    cli = os.environ["LAZYTRACE_CLI"]
    weights = tmp_path / "cli.safetensors"
    subprocess.run([cli, "train", "--layers", "2", "--hidden", "32", "--intermediate", "64",
                    "--heads", "4", "--kv-heads", "2", "--steps", "40", "--batch", "4", "--seq",
                    "32", "--out", str(weights)], check=True, capture_output=True)
    out = subprocess.run([cli, "generate", "--weights", str(weights), "--prompt", "The ",
                          "--max-tokens", "12", "--temperature", "0"],
                         check=True, capture_output=True)
    want = out.stdout.decode("latin-1")[len("The "):].rstrip("\n")
    model = load(weights, layers_mode="scan")
    assert [n for n, _ in model.named_parameters()][:2] == ["embed.weight", "layers.0.attn_norm.weight"]
    assert generate(model, "The ", 12) == want
    assert generate(load(weights, layers_mode="scan", stacked=True), "The ", 12) == want


def test_assume_pure_layers_see_a_replaced_parameter():
    lt.manual_seed(4)
    model = Decoder(SMALL, layers_mode="assume_pure")
    tokens = lt.tensor([[1, 2, 3, 4]])
    before = model(tokens).detach().numpy()
    layer = model.layers[1]
    layer.mlp.up_proj.weight = lt.nn.Parameter(layer.mlp.up_proj.weight.detach() * 2.0)
    after = model(tokens).detach().numpy()
    model.layers_mode = "loop"
    np.testing.assert_allclose(after, model(tokens).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(after - before).max() > 1e-3
