"""The Python decoder's saving, loading, copying, generating and construction: what the
audit found wrong (the config's floats dropped by save, a stacked model's unchecked keys,
generate's unchecked arguments, copies failing on traced caches, ignored keywords)."""

import copy
import pickle

import numpy as np
import pytest

import lazytrace as lt
from lazytrace.models import Decoder, DecoderConfig, generate, load, save

TINY = DecoderConfig(vocab=32, hidden=16, intermediate=24, heads=4, kv_heads=2, layers=2, max_seq=8)
TOKENS = [[1, 5, 3, 10, 0, 2, 7]]


def _logits(model, tokens=TOKENS):
    return model(lt.tensor(tokens)).detach().numpy()


# ---- save / load keep rope_theta and norm_eps


def test_save_writes_rope_theta_and_norm_eps_and_load_reads_them_back_exactly(tmp_path):
    c = DecoderConfig(vocab=32, hidden=16, intermediate=24, heads=4, kv_heads=2, layers=2,
                      max_seq=8, rope_theta=500000.0, norm_eps=0.01)
    lt.manual_seed(1)
    model = Decoder(c)
    save(model, tmp_path / "m.safetensors")
    meta = lt.load_metadata(str(tmp_path / "m.safetensors"))
    assert meta["rope_theta"] == "500000.0" and meta["norm_eps"] == "0.01"
    assert meta["layers"] == "2" and meta["format"] == "lazytrace-decoder"
    again = load(tmp_path / "m.safetensors")
    assert again.config == c
    np.testing.assert_array_equal(_logits(again), _logits(model))
    # the defaults give other logits: the round trip above is not the defaults by luck
    default = Decoder(DecoderConfig(**{**c.__dict__, "rope_theta": 10000.0, "norm_eps": 1e-6}))
    default.load_state_dict(model.state_dict())
    assert np.abs(_logits(default) - _logits(model)).max() > 1e-4


def test_save_round_trips_floats_that_str_of_a_short_format_would_round(tmp_path):
    c = DecoderConfig(**{**TINY.__dict__, "rope_theta": 12345.678901234567,
                         "norm_eps": 1.0000000000000002e-05})
    save(Decoder(c), tmp_path / "m.safetensors")
    got = load(tmp_path / "m.safetensors").config
    assert got.rope_theta == 12345.678901234567 and got.norm_eps == 1.0000000000000002e-05


def test_a_file_without_the_float_keys_as_the_command_line_writes_loads_with_the_defaults(tmp_path):
    lt.manual_seed(2)
    model = Decoder(TINY)
    meta = {"format": "lazytrace-decoder", **{k: str(getattr(TINY, k)) for k in (
        "vocab", "hidden", "intermediate", "heads", "kv_heads", "layers", "max_seq")}}
    lt.save_file(dict(model.state_dict()), str(tmp_path / "cli.safetensors"), meta)
    again = load(tmp_path / "cli.safetensors", layers_mode="scan", stacked=True)
    assert again.config.rope_theta == 10000.0 and again.config.norm_eps == 1e-6
    np.testing.assert_allclose(_logits(again), _logits(model), rtol=1e-5, atol=1e-6)


def test_a_bad_float_in_the_metadata_is_a_clear_error(tmp_path):
    meta = {"format": "lazytrace-decoder", "vocab": "32", "hidden": "16", "intermediate": "24",
            "heads": "4", "kv_heads": "2", "layers": "2", "max_seq": "8", "rope_theta": "big"}
    lt.save_file(dict(Decoder(TINY).state_dict()), str(tmp_path / "bad.safetensors"), meta)
    with pytest.raises(ValueError, match=r"\[models.load\].*'rope_theta'.*'big'"):
        load(tmp_path / "bad.safetensors")


# ---- a stacked model checks the per-layer keys as an unstacked one does


def _per_layer_sd(seed=0):
    lt.manual_seed(seed)
    return dict(Decoder(TINY).per_layer_state_dict())


def test_stacked_strict_load_rejects_unexpected_per_layer_keys_like_the_unstacked_model():
    sd = _per_layer_sd()
    sd["layers.2.attn.q_proj.weight"] = lt.ones(16, 16)  # a third layer the model lacks
    sd["layers.0.attn.q_proj.weightX"] = lt.ones(1)  # a typo
    with pytest.raises(RuntimeError) as unstacked:
        Decoder(TINY).load_per_layer_state_dict(sd)
    stacked_model = Decoder(TINY, layers_mode="scan", stacked=True)
    before = stacked_model.layers.attn.q_proj.weight.detach().numpy().copy()
    with pytest.raises(RuntimeError) as stacked:
        stacked_model.load_per_layer_state_dict(sd)
    assert str(stacked.value) == str(unstacked.value)
    assert "unexpected keys ['layers.2.attn.q_proj.weight', 'layers.0.attn.q_proj.weightX']" \
        in str(stacked.value)
    # nothing was copied
    np.testing.assert_array_equal(stacked_model.layers.attn.q_proj.weight.detach().numpy(), before)


def test_stacked_strict_load_names_missing_per_layer_keys():
    sd = _per_layer_sd()
    del sd["layers.1.mlp.up_proj.weight"]
    with pytest.raises(RuntimeError, match=r"missing keys \['layers.1.mlp.up_proj.weight'\], "
                                           r"unexpected keys \[\]"):
        Decoder(TINY, layers_mode="scan", stacked=True).load_per_layer_state_dict(sd)


def test_stacked_non_strict_load_reports_the_keys_and_loads_the_rest():
    sd = _per_layer_sd(seed=5)
    want = sd["layers.0.mlp.up_proj.weight"].numpy()
    del sd["layers.1.mlp.up_proj.weight"]
    sd["layers.2.attn.q_proj.weight"] = lt.ones(16, 16)
    lt.manual_seed(9)
    model = Decoder(TINY, layers_mode="scan", stacked=True)
    kept = model.layers.mlp.up_proj.weight.detach().numpy()[1].copy()
    got = model.load_per_layer_state_dict(sd, strict=False)
    assert got.missing_keys == ["layers.1.mlp.up_proj.weight"]
    assert got.unexpected_keys == ["layers.2.attn.q_proj.weight"]
    w = model.layers.mlp.up_proj.weight.detach().numpy()
    np.testing.assert_array_equal(w[0], want)  # loaded
    np.testing.assert_array_equal(w[1], kept)  # not given: kept its value
    np.testing.assert_array_equal(model.embed.weight.detach().numpy(), sd["embed.weight"].numpy())


def test_stacked_load_of_a_wrongly_shaped_slice_names_it():
    sd = _per_layer_sd()
    sd["layers.1.attn.k_proj.weight"] = lt.ones(4, 16)
    with pytest.raises(RuntimeError, match=r"size mismatch for layers.1.attn.k_proj.weight: "
                                           r"copying a param with shape \(4, 16\), the shape in "
                                           r"the current model is \(8, 16\)"):
        Decoder(TINY, layers_mode="scan", stacked=True).load_per_layer_state_dict(sd)


def test_stacked_load_of_a_matching_dict_loads_and_reports_nothing():
    sd = _per_layer_sd(seed=3)
    lt.manual_seed(3)
    ref = Decoder(TINY)
    model = Decoder(TINY, layers_mode="scan", stacked=True)
    got = model.load_per_layer_state_dict(sd)
    assert (got.missing_keys, got.unexpected_keys) == ([], [])
    np.testing.assert_allclose(_logits(model), _logits(ref), rtol=1e-5, atol=1e-6)


# ---- generate checks its arguments


@pytest.fixture(scope="module")
def byte_model():
    lt.manual_seed(0)
    return Decoder(DecoderConfig(vocab=256, hidden=16, intermediate=24, heads=4, kv_heads=2,
                                 layers=1, max_seq=8)).eval()


def test_generate_rejects_an_empty_prompt(byte_model):
    with pytest.raises(ValueError, match=r"\[models.generate\] the prompt must not be empty"):
        generate(byte_model, "", 2)


def test_generate_rejects_a_model_that_is_not_byte_level():
    model = Decoder(DecoderConfig(**{**TINY.__dict__, "vocab": 300}))
    with pytest.raises(ValueError, match=r"\[models.generate\].*vocab <= 256.*vocab 300"):
        generate(model, "ab", 1)


def test_generate_rejects_prompt_bytes_outside_the_vocab():
    with pytest.raises(ValueError, match=r"\[models.generate\] the prompt has byte 97.*vocab of 32"):
        generate(Decoder(TINY), "a", 1)


def test_generate_rejects_bad_counts_and_overlong_prompts(byte_model):
    with pytest.raises(ValueError, match=r"\[models.generate\] max_tokens must be at least 0, got -1"):
        generate(byte_model, "ab", -1)
    with pytest.raises(ValueError, match=r"\[models.generate\] the prompt \(9 bytes\) and "
                                         r"max_tokens 0 exceed the model's context of 8"):
        generate(byte_model, "abcdefghi", 0)
    with pytest.raises(ValueError, match=r"the prompt \(3 bytes\) and max_tokens 6 exceed"):
        generate(byte_model, "abc", 6)
    with pytest.raises(TypeError, match=r"\[models.generate\] max_tokens must be an int"):
        generate(byte_model, "ab", 2.0)
    with pytest.raises(TypeError, match=r"\[models.generate\] the prompt must be a str"):
        generate(byte_model, b"ab", 2)


def test_generate_picks_the_greedy_bytes(byte_model):
    assert generate(byte_model, "ab", 0) == ""
    out = generate(byte_model, "ab", 3)
    data = list(b"ab")
    for _ in range(3):
        logits = _logits(byte_model, [data + [0] * (8 - len(data))])[0, len(data) - 1]
        data.append(int(np.flatnonzero(logits == logits.max())[-1]))
    assert out == bytes(data[2:]).decode("latin-1")


# ---- copies and pickles after a forward in every mode


@pytest.mark.parametrize("mode,stacked", [("assume_pure", False), ("scan", True), ("scan", False)])
def test_deepcopy_after_a_forward_gives_the_same_logits_and_an_independent_model(mode, stacked):
    lt.manual_seed(7)
    model = Decoder(TINY, layers_mode=mode, stacked=stacked)
    before = _logits(model)  # fills the traced caches
    twin = copy.deepcopy(model)
    np.testing.assert_array_equal(_logits(twin), before)
    if mode == "assume_pure":
        assert twin._pure_layer is not model._pure_layer
    # a training step on the copy changes the copy only
    tokens = lt.tensor(TOKENS)
    loss = lt.nn.functional.cross_entropy(twin(tokens)[0, :-1], tokens[0, 1:])
    loss.backward()
    lt.optim.SGD(twin.parameters(), lr=0.5).step()
    np.testing.assert_array_equal(_logits(model), before)
    after = _logits(twin)
    assert np.abs(after - before).max() > 1e-3
    ref = Decoder(TINY)  # the copy runs its own (trained) weights
    ref.load_per_layer_state_dict(twin.per_layer_state_dict())
    np.testing.assert_allclose(after, _logits(ref), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,stacked", [("assume_pure", False), ("scan", True)])
def test_pickle_after_a_forward_gives_the_same_logits(mode, stacked):
    lt.manual_seed(8)
    model = Decoder(TINY, layers_mode=mode, stacked=stacked)
    before = _logits(model)
    again = pickle.loads(pickle.dumps(model))
    assert (again.layers_mode, again.stacked, again.config) == (mode, stacked, TINY)
    np.testing.assert_array_equal(_logits(again), before)
    np.testing.assert_array_equal(_logits(model), before)  # the original still runs


# ---- the config and keyword fields


def test_keywords_override_the_configs_fields_and_leave_the_config_alone():
    model = Decoder(TINY, layers=3, rope_theta=500.0)
    assert model.config.layers == 3 and model.config.rope_theta == 500.0
    assert model.config.hidden == TINY.hidden and len(model.layers) == 3
    assert TINY.layers == 2 and TINY.rope_theta == 10000.0
    assert Decoder(TINY).config is TINY
    assert Decoder(hidden=16, intermediate=8, layers=1, max_seq=4).config.intermediate == 8


def test_unknown_keywords_and_a_config_of_the_wrong_type_are_clear_errors():
    with pytest.raises(TypeError, match=r"\[Decoder\] unknown keyword argument\(s\) \['layer'\]"):
        Decoder(TINY, layer=5)
    with pytest.raises(TypeError, match=r"\[Decoder\] config must be a DecoderConfig, got dict"):
        Decoder({"layers": 2})
    with pytest.raises(ValueError, match=r"\[DecoderConfig\] heads \(4\) must be a multiple of "
                                         r"kv_heads \(3\)"):
        Decoder(TINY, kv_heads=3)


def test_a_stacked_models_training_step_compiles_once():
    """The README's loop: the per-layer weights a stacked model was made from and its
    template's are computed when it is made, so the first step's graph is every step's."""
    import gc

    import lazytrace.nn.functional as F

    gc.collect()  # other tests' pending tensors (in cycles) out of this test's first sync
    lt.sync()
    model = Decoder(DecoderConfig(vocab=32, hidden=16, intermediate=32, heads=2, kv_heads=1,
                                  layers=3, max_seq=8), layers_mode="scan", stacked=True)
    opt = lt.optim.AdamW(model.parameters(), lr=3e-3)
    sched = lt.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    tokens = lt.tensor([[1, 5, 9, 2, 7]])
    compiles = []
    for _ in range(3):
        before = lt.metrics.counter_value("CompileCount") or 0
        loss = F.cross_entropy(model(tokens[:, :-1])[0], tokens[0, 1:])
        loss.backward()
        lt.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        lt.sync()
        sched.step()
        compiles.append((lt.metrics.counter_value("CompileCount") or 0) - before)
    assert compiles[1:] == [0, 0], compiles
