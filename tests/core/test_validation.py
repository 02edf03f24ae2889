"""Validation before allocation: configs, the memory check, tensors from torch.load, plain pickles,
loading with progress and cancel, numerical trouble shown instead of raised, and property tests."""

from __future__ import annotations

import itertools
import math
import pickle
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.checkpoint import (
    gpt2,
    llama,
    load_checkpoint,
    neox,
    save_native,
    validate,
)
from explorer.core.checkpoint.convert import get_bool, get_float, get_int, meta_model
from explorer.core.checkpoint.families import FAMILIES
from explorer.core.checkpoint.loader import configure
from explorer.core.checkpoint.validate import parameter_count
from explorer.core.checkpoint.pickles import is_plain
from explorer.core.checkpoint.safe_io import check_loaded_tensors
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError, ExplorerError, LoadCancelled
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer

SMALL = {"vocab_size": 16, "n_ctx": 8, "d_model": 8, "n_layers": 2, "n_heads": 2, "d_head": 4, "d_ff": 16}


@pytest.mark.parametrize("change, message", [
    ({"n_layers": True}, "n_layers must be an integer"),
    ({"n_layers": 2.0}, "n_layers must be an integer"),
    ({"d_model": "8"}, "d_model must be an integer"),
    ({"vocab_size": None}, "vocab_size must be an integer"),
    ({"n_layers": 0}, "n_layers must be in [1, 1,024]"),
    ({"n_layers": 10**9}, "n_layers must be in"),
    ({"norm_eps": -1.0}, "norm_eps must be in (0, 1]"),
    ({"norm_eps": float("nan")}, "norm_eps must be a finite number"),
    ({"rotary_base": 0.0}, "rotary_base must be in (0"),
    ({"rotary_base": float("inf")}, "rotary_base must be a finite number"),
    ({"causal": 1}, "causal must be true or false"),
    ({"n_kv_heads": 3}, "must be a multiple of n_kv_heads"),
    ({"positions": "rotary", "d_head": 3, "d_model": 6}, "rotary positions need an even d_head"),
])
def test_model_config_checks_types_ranges_and_bounds(change, message):
    with pytest.raises(CheckpointError) as err:
        ModelConfig(**{**SMALL, **change})
    assert message in str(err.value)


def test_parameter_count_follows_the_shapes_of_every_variant():
    variants = list(itertools.product(("layernorm", "rmsnorm", "none"), ("learned", "rotary", "sinusoidal"),
                                      (False, True), (False, True), (False, True), (None, 1), (False, True)))
    for norm, pos, gated, bias, tie, kv, attn_only in variants[::5]:
        cfg = ModelConfig(**{**SMALL, "norm": norm, "positions": pos, "gated_ffn": gated, "attn_bias": bias,
                             "mlp_bias": bias, "tie_embeddings": tie, "n_kv_heads": kv, "attn_only": attn_only})
        assert parameter_count(cfg) == meta_model(cfg).num_parameters(), cfg
    encoder = ModelConfig(**{**SMALL, "token_types": 2, "embed_norm": True, "mlm_head": True, "causal": False})
    assert parameter_count(encoder) == meta_model(encoder).num_parameters()


def test_a_config_too_large_for_the_machine_is_refused_with_its_numbers(monkeypatch):
    monkeypatch.setattr(validate, "available_memory", lambda device=None: int(0.4 * 2**30))
    hf = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "n_positions": 1024}
    with validate.loading("gpt2-small", "cpu"), pytest.raises(CheckpointError) as err:
        configure(FAMILIES["gpt2"], hf)  # what the loader does with a config.json
    assert str(err.value) == ("the config implies 124.4M parameters = 498 MB in float32 (12 layers, d_model 768, "
                              "vocabulary 50,257); this machine has 0.4 GB available")
    configure(FAMILIES["gpt2"], hf)  # outside a load nothing is checked against the machine


@pytest.mark.parametrize("value", [True, 2.0, "2", None, float("nan"), -1, [2]])
def test_integer_getter_refuses_what_is_not_a_non_negative_integer(value):
    with pytest.raises(CheckpointError, match="n_layer"):
        get_int({"n_layer": value}, "GPT-2", "n_layer")


@pytest.mark.parametrize("value", [True, "1e-5", None, float("nan"), float("inf"), [1]])
def test_float_and_bool_getters_are_strict(value):
    with pytest.raises(CheckpointError, match="eps"):
        get_float({"eps": value}, "llama", "eps")
    if not isinstance(value, bool):
        with pytest.raises(CheckpointError, match="flag"):
            get_bool({"flag": value}, "llama", "flag")


def test_plain_pickle_check_is_linear_in_shared_references():
    x: list = []
    for _ in range(60):  # 2**60 paths, 61 objects
        x = [x, x]
    assert is_plain(x, max_depth=100)
    assert not is_plain(x, max_depth=32)  # deeper than allowed is refused, quickly
    cycle: list = []
    cycle.append(cycle)
    assert is_plain(cycle, max_depth=100)
    assert not is_plain({"a": object()})


@pytest.mark.parametrize("tensor, message", [
    (torch.zeros(4).as_strided((1000, 4), (0, 1)), "repeats its elements"),
    (torch.zeros(10).as_strided((4, 4), (1, 1)), "overlap"),
    (torch.zeros(4, 4).to_sparse(), "only dense CPU tensors"),
    (torch.empty(3, device="meta"), "only dense CPU tensors"),
])
def test_tensors_from_torch_load_are_checked_against_their_storage(tensor, message, tmp_path):
    with pytest.raises(CheckpointError, match=message):
        check_loaded_tensors({"w": tensor}, tmp_path / "x.bin")
    check_loaded_tensors({"w": torch.zeros(3, 4).t(), "n": [1, "a"], "d": {"e": None}}, tmp_path / "x.bin")


@pytest.fixture
def native_dir(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(**SMALL)
    model = Transformer(cfg)
    save_native(model, VocabTokenizer(list("abcdefghijklmnop"), split="chars"), tmp_path / "m")
    return tmp_path / "m", model


def test_loading_reports_each_tensor_and_builds_the_model_from_them(native_dir):
    path, reference = native_dir
    seen = []
    loaded = load_checkpoint(path, device="cpu", progress=lambda i, n, name: seen.append((i, n, name)))
    n = len(seen)
    assert [s[0] for s in seen] == list(range(n)) and {s[1] for s in seen} == {n} and n >= 10
    for name, p in reference.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p), name
    assert loaded.model.unembed.weight is loaded.model.embed.weight  # tied, not copied
    assert all(p.device.type == "cpu" for p in loaded.model.parameters())


def test_cancel_stops_between_tensors(native_dir):
    path, _ = native_dir
    stop = threading.Event()
    seen = []

    def progress(i, n, name):
        seen.append(i)
        if i == 3:
            stop.set()

    with pytest.raises(LoadCancelled):
        load_checkpoint(path, device="cpu", progress=progress, cancel=stop)
    assert seen == [0, 1, 2, 3]
    with pytest.raises(LoadCancelled):
        load_checkpoint(path, device="cpu", cancel=lambda: True)


# --- numerical trouble is shown, not raised -----------------------------------------------------

@pytest.fixture
def nan_model():
    from explorer.core.loaded import LoadedModel

    torch.manual_seed(0)
    model = Transformer(ModelConfig(**SMALL)).eval()
    with torch.no_grad():
        model.blocks[1].attn.W_O.weight[0, 0] = float("nan")
    return LoadedModel(model, VocabTokenizer(list("abcdefghijklmnop"), split="chars"), "nan", "test", "gpt2")


def test_first_nonfinite_names_the_layer_where_nan_appears(nan_model):
    from explorer.core.analysis.numerics import first_nonfinite

    trace = nan_model.trace("abcabc")
    found = first_nonfinite(trace)
    assert found is not None and found.layer == 1 and found.key == "blocks.1.attn.out" and found.what == "NaN"
    assert "layer 1" in found.describe()
    assert np.isnan(trace["logits"]).all()  # the trace shows them as they are


def test_generation_stops_with_the_step_where_nan_appeared(nan_model):
    from explorer.core.generation.generate import generate
    from explorer.core.generation.sampling import SamplingParams

    result = generate(nan_model, "abc", SamplingParams(max_new_tokens=5, seed=0))
    assert result.stop_reason == "nonfinite" and result.n_new == 0
    assert result.stop_description == "the model produced NaN at step 0"


def test_extreme_but_legal_controls_behave_as_their_limit():
    from explorer.core.generation.sampling import (
        SamplingParams,
        apply_controls,
        make_rng,
        next_token,
    )

    x = np.array([1.0, 3.0, 2.0, -1.0, 3.0])
    assert next_token(x, SamplingParams(temperature=1e-310), [], make_rng(0)) == 1  # greedy
    assert next_token(x * 1e300, SamplingParams(temperature=1e-10), [], make_rng(0)) == 1
    processed = apply_controls(x, SamplingParams(repetition_penalty=1e-320), [2, 3])
    assert np.isfinite(processed).sum() == 1 and processed[2] == 0.0  # the largest repeated positive logit
    assert next_token(x, SamplingParams(repetition_penalty=1e300), [1, 4], make_rng(0)) in (0, 2, 3)


# --- property tests -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6)
GPT2_KEYS = ["n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_inner", "layer_norm_epsilon",
             "activation_function", "tie_word_embeddings"]
LLAMA_KEYS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
              "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "head_dim", "rope_scaling",
              "hidden_act", "tie_word_embeddings", "attention_bias", "rotary_pct", "partial_rotary_factor"]
GOOD_GPT2 = {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 50257, "n_positions": 16}
GOOD_LLAMA = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 24,
              "vocab_size": 64}
NATIVE_KEYS = [*SMALL, "norm_eps", "rotary_base", "positions", "norm", "n_kv_heads", "rotary_dim", "causal"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(["gpt2", "llama", "neox", "native"]), data=st.data())
def test_random_configs_only_ever_give_a_clean_checkpoint_error(family, data):
    keys = {"gpt2": GPT2_KEYS, "native": NATIVE_KEYS}.get(family, LLAMA_KEYS)
    base = {"gpt2": GOOD_GPT2, "native": SMALL}.get(family, GOOD_LLAMA)
    changes = data.draw(st.dictionaries(st.sampled_from(keys), json_values | st.integers(-5, 70000), max_size=4))
    dropped = data.draw(st.sets(st.sampled_from(sorted(base)), max_size=2))
    hf = {k: v for k, v in {**base, **changes}.items() if k not in dropped}
    build = {"gpt2": gpt2.gpt2_config, "llama": llama.llama_config, "neox": neox.neox_config,
             "native": ModelConfig.from_dict}[family]
    try:
        with validate.loading("fuzz", "cpu"):
            cfg = build(hf)
    except CheckpointError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    cfg = cfg[0] if isinstance(cfg, tuple) else cfg
    assert isinstance(cfg, ModelConfig) and parameter_count(cfg) > 0


@settings(max_examples=300, deadline=None)
@given(temperature=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 3) | st.none(),
       top_k=st.integers(-3, 100) | st.floats(), top_p=st.floats(allow_nan=True, allow_infinity=True),
       min_p=st.floats(allow_nan=True), penalty=st.floats(allow_nan=True, allow_infinity=True),
       seed=st.integers(-2, 2**64) | st.none(),
       logits=st.lists(st.floats(-1e308, 1e308), min_size=1, max_size=20))
def test_random_sampling_parameters_give_a_token_or_a_value_error(temperature, top_k, top_p, min_p, penalty, seed,
                                                                  logits):
    from explorer.core.generation.sampling import SamplingParams, make_rng, next_token

    try:
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                repetition_penalty=penalty, seed=seed)
    except ValueError as exc:
        assert str(exc)
        return
    token = next_token(np.array(logits), params, [0, len(logits) - 1], make_rng(params.seed))
    assert 0 <= token < len(logits) and math.isfinite(logits[token])


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint("shakespeare", device="cpu")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=()), min_size=1, max_size=40)
       | st.sampled_from(["\ud800", "a\x00b", "\u202eabc\u202c", "\udfff\ud800x", "\U0001f600" * 5]))
def test_random_unicode_prompts_never_crash(shakespeare, text):
    _encode_trace_generate(shakespeare, text)


def test_fifty_thousand_emoji_are_cut_to_the_context(shakespeare):
    _encode_trace_generate(shakespeare, "\U0001f600" * 50_000)


def _encode_trace_generate(shakespeare, text):
    from explorer.core.generation.generate import generate
    from explorer.core.generation.sampling import SamplingParams

    try:
        ids, _ = shakespeare.encode(text)
    except ExplorerError as exc:
        assert str(exc)
        return
    trace = shakespeare.trace_ids(ids)
    assert trace.n_tokens == len(ids) <= shakespeare.config.n_ctx
    result = generate(shakespeare, ids[-8:], SamplingParams(max_new_tokens=2, seed=0))
    assert result.n_new <= 2 and isinstance(result.text, str)


def test_a_pickle_of_plain_data_is_read_and_a_class_refused(tmp_path):
    from explorer.core.checkpoint.pickles import read_plain_pickle

    (tmp_path / "ok.pkl").write_bytes(pickle.dumps({"a": [1, 2.0, "x", None, (True,)]}))
    assert read_plain_pickle(tmp_path / "ok.pkl") == {"a": [1, 2.0, "x", None, (True,)]}
    (tmp_path / "bad.pkl").write_bytes(pickle.dumps({"a": threading.Event}))
    with pytest.raises(CheckpointError, match="refused"):
        read_plain_pickle(tmp_path / "bad.pkl")


def test_weights_headers_are_checked_against_the_config_before_reading():
    from pathlib import Path

    cfg = ModelConfig(**SMALL)
    ok = {f"model.layers.{i}.mlp.w{j}": (8, 8) for i in range(2) for j in range(3)}
    ok.update({f"vision.encoder.layers.{i}.w": (2,) for i in range(5)})  # another, smaller stack: not ours
    with validate.loading("x", "cpu") as ctx:
        ctx.config = cfg
        validate.check_headers(Path("w.safetensors"), ok)
        with pytest.raises(CheckpointError, match="block 7, but the config has 2 layers"):
            validate.check_headers(Path("w.safetensors"), {**ok, "model.layers.7.mlp.w0": (8, 8)})
        with pytest.raises(CheckpointError, match="more than any tensor the config implies"):
            validate.check_headers(Path("w.safetensors"), {"embed": (10**6, 8)})
        with pytest.raises(CheckpointError, match="the config does not describe these weights"):
            validate.check_headers(Path("w.safetensors"), {f"t{i}": (16, 8) for i in range(80)})
