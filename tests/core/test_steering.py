"""Steering: alpha * v added to the residual stream entering a block equals a transformers forward hook
that adds the same vector (logits, greedy continuations), on a tiny random GPT-2 and Llama; contrast
vectors equal the mean difference computed by hand; vector files are read as data only."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from loader_reference import IDS

from explorer.core.checkpoint import load_checkpoint
from explorer.core.features.steering import (
    contrast_vector,
    load_vector,
    neuron_vector,
    parse_steer,
    steer,
)
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.interventions.apply import record_sites, run
from explorer.core.interventions.spec import InterventionError
from explorer.core.trace import CaptureSpec

TOL = 1e-4


def _hooked(blocks, layer: int, vector: torch.Tensor, alpha: float):
    def pre_hook(module, args, kwargs):
        if args:
            return (args[0] + alpha * vector,) + tuple(args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + alpha * vector}
    return blocks[layer].register_forward_pre_hook(pre_hook, with_kwargs=True)


def _check_against_transformers(loaded, reference, blocks, ids, layer: int, alpha: float) -> None:
    d = loaded.config.d_model
    v = np.random.default_rng(layer).standard_normal(d).astype(np.float32)
    iv = steer(layer, v, alpha, "random")
    handle = _hooked(blocks, layer, torch.from_numpy(v), alpha)
    try:
        with torch.no_grad():
            expected = reference(torch.tensor([ids])).logits[0].numpy()
            hf_new = reference.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                                        pad_token_id=0, eos_token_id=None)[0, len(ids):].tolist()
    finally:
        handle.remove()
    ours = run(loaded.model, ids, [iv]).numpy()
    np.testing.assert_allclose(ours, expected, atol=TOL, rtol=0)
    assert np.abs(ours - run(loaded.model, ids).numpy()).max() > 1e-2, "the steer should change the logits"
    plain = generate(loaded, ids, SamplingParams(temperature=0.0, max_new_tokens=8, stop_at_eos=False))
    assert plain.token_ids != hf_new, "steering should change the greedy continuation"
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_at_eos=False)
    for use_cache in (True, False):
        result = generate(loaded, ids, params, use_cache=use_cache, interventions=[iv])
        assert result.token_ids == hf_new


@pytest.mark.parametrize("layer,alpha", [(0, 2.0), (2, -3.0)])
def test_steering_gpt2_equals_a_forward_hook(tiny_gpt2, layer, alpha) -> None:
    loaded, reference = tiny_gpt2
    ids = loaded.encode("The cat sat on the mat and looked at the")[0]
    _check_against_transformers(loaded, reference, reference.transformer.h, ids, layer, alpha)


def test_steering_llama_equals_a_forward_hook(llama) -> None:
    path, reference = llama
    loaded = load_checkpoint(path, device="cpu")
    _check_against_transformers(loaded, reference, reference.model.layers, IDS[:8], 1, 1.5)


def test_a_steered_trace_rerun_adds_the_vector_once(tiny_gpt2) -> None:
    loaded, _ = tiny_gpt2
    ids = loaded.encode("one two three four")[0]
    iv = steer(1, np.ones(loaded.config.d_model, np.float32), 0.5)
    trace = loaded.trace_ids(ids, CaptureSpec.compact(), interventions=[iv])
    kept, _ = record_sites(loaded.model, ids, {("mlp.out", 1), ("attn.out", 1)}, [iv])
    np.testing.assert_allclose(trace["blocks.1.mlp.out"], kept[("mlp.out", 1)].numpy(), atol=1e-5)
    np.testing.assert_allclose(trace["blocks.1.attn.out"], kept[("attn.out", 1)].numpy(), atol=1e-5)


def test_contrast_vector_is_the_mean_difference_by_hand(tiny_gpt2) -> None:
    loaded, reference = tiny_gpt2
    a, b = loaded.encode("I love this, it is wonderful")[0], loaded.encode("I hate this")[0]
    with torch.no_grad():
        ha = reference(torch.tensor([a]), output_hidden_states=True).hidden_states
        hb = reference(torch.tensor([b]), output_hidden_states=True).hidden_states
    for layer in (0, 2):
        by_hand = (ha[layer][0].double().mean(0) - hb[layer][0].double().mean(0)).numpy()
        np.testing.assert_allclose(contrast_vector(loaded.model, a, b, layer), by_hand, atol=1e-5)
    with pytest.raises(InterventionError, match="two non-empty prompts"):
        contrast_vector(loaded.model, a, [], 1)


def test_neuron_vector_is_the_neurons_output_weights(tiny_gpt2) -> None:
    loaded, reference = tiny_gpt2
    expected = reference.transformer.h[1].mlp.c_proj.weight[37].detach().numpy()  # Conv1D: [d_ff, d]
    np.testing.assert_allclose(neuron_vector(loaded.model, 1, 37), expected, atol=1e-6)
    with pytest.raises(InterventionError):
        neuron_vector(loaded.model, 1, loaded.config.d_ff)


def test_vector_files_are_data_only(tmp_path) -> None:
    good = tmp_path / "v.npy"
    np.save(good, np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(load_vector(good, 8), np.arange(8))
    iv = parse_steer(f"2:{good}:-1.5", 8, 3)
    assert (iv.target, iv.layer, iv.amount, iv.label) == ("steer", 2, -1.5, "steer 2 (v.npy) -1.5")
    evil = tmp_path / "evil.npy"
    np.save(evil, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InterventionError, match="not a .npy vector file"):
        load_vector(evil, 8)
    pickled = tmp_path / "p.npy"
    pickled.write_bytes(pickle.dumps(np.zeros(8)))
    with pytest.raises(InterventionError, match="not a .npy vector file"):
        load_vector(pickled, 8)
    np.save(tmp_path / "short.npy", np.zeros(7, np.float32))
    with pytest.raises(InterventionError, match=r"float32 \(7,\); a steering vector is 8 floats"):
        load_vector(tmp_path / "short.npy", 8)
    np.save(tmp_path / "nan.npy", np.full(8, np.nan, np.float32))
    with pytest.raises(InterventionError, match="NaN"):
        load_vector(tmp_path / "nan.npy", 8)
    for bad in ("2:v.npy", "x:v.npy:1", f"9:{good}:1", "2::1"):
        with pytest.raises(InterventionError):
            parse_steer(bad, 8, 3)
