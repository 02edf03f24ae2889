"""Features as interventions, checked against runs where the activation is replaced by hand (with sae_lens'
own encode/decode): switching a feature off = reconstruction - that feature's term + the SAE's error term."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sae_reference import write_sae

from explorer.core.features.analysis import (
    feature_along,
    feature_vocab_effect,
    reconstruction_error,
    strongest_features,
    top_features,
    trace_activations,
)
from explorer.core.features.edits import feature_intervention
from explorer.core.features.sae import open_sae
from explorer.core.interventions.apply import record_sites, run
from explorer.core.interventions.spec import InterventionError, check
from explorer.core.trace import CaptureSpec

pytestmark = pytest.mark.recent_reference  # compares with sae_lens (needs NumPy 2: not in the floors step)

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tiny_gpt2, tmp_path_factory):
    loaded, reference = tiny_gpt2
    root = tmp_path_factory.mktemp("saes")
    cfg = loaded.config
    specs = {"resid": ("blocks.1.hook_resid_pre", 64), "mlp": ("blocks.1.mlp.hook_post", cfg.d_ff),
             "z": ("blocks.2.attn.hook_z", 64), "out": ("blocks.0.hook_mlp_out", 64)}
    saes = {}
    for name, (hook, width) in specs.items():
        extra = {"reshape_activations": "hook_z"} if name == "z" else {}
        ref = write_sae(root / name, "jumprelu" if name == "mlp" else "standard", hook, width, 48, **extra)
        saes[name] = (open_sae(root / name, cfg, loaded.name, allow_other_model=True), ref)
    ids = loaded.encode(PROMPT)[0]
    return loaded, reference, saes, list(ids)


def _active_feature(sae, trace) -> int:
    acts = sae.activations(trace)
    return int(acts.max(0).argmax())


def _by_hand_rec(ref, site, layer, f, mode="zero", amount=None):
    """A rec that replaces the activation at (site, layer) as the issue defines it, with sae_lens' SAE."""
    def rec(s, lyr, tensor):
        if (s, lyr) != (site, layer):
            return tensor
        x = tensor[0]
        if site == "attn.z":
            x = x.permute(1, 0, 2)                     # [n, H, dh]: sae_lens' hook_z input
        with torch.no_grad():
            acts = ref.encode(x)
            recon = ref.decode(acts)
            term = acts[..., f:f + 1] * ref.W_dec[f]
            error = x.reshape(recon.shape) - recon
            if mode == "zero":
                new = recon - term.reshape(recon.shape) + error
            else:
                wanted = torch.full_like(acts[..., f:f + 1], amount) if mode == "clamp" else acts[..., f:f + 1] * amount
                new = recon + ((wanted - acts[..., f:f + 1]) * ref.W_dec[f]).reshape(recon.shape) + error
        new = new.reshape(x.shape)
        if site == "attn.z":
            new = new.permute(1, 0, 2)
        return new[None]
    return rec


@pytest.mark.parametrize("name", ["resid", "mlp", "z", "out"])
@pytest.mark.parametrize("mode,amount", [("zero", None), ("clamp", 5.0), ("scale", 3.0)])
def test_feature_edit_equals_the_replacement_by_hand(setup, name, mode, amount) -> None:
    loaded, _, saes, ids = setup
    sae, ref = saes[name]
    trace = loaded.trace_ids(ids)
    f = _active_feature(sae, trace)
    iv = feature_intervention(sae, f, mode, amount)
    ours = run(loaded.model, ids, [iv]).numpy()
    with torch.inference_mode():
        expected = loaded.model(torch.tensor([ids]), _by_hand_rec(ref, sae.hook.site, sae.hook.layer, f, mode,
                                                                   amount))[0].numpy()
    np.testing.assert_allclose(ours, expected, atol=TOL, rtol=0)
    assert np.abs(ours - run(loaded.model, ids).numpy()).max() > 1e-3, "the edit should change something"


def test_feature_off_on_the_residual_stream_equals_a_transformers_hook(setup) -> None:
    loaded, reference, saes, ids = setup
    sae, ref = saes["resid"]
    f = _active_feature(sae, loaded.trace_ids(ids))

    def pre_hook(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        acts = ref.encode(x)
        recon = ref.decode(acts)
        new = recon - acts[..., f:f + 1] * ref.W_dec[f] + (x - recon)
        return ((new,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

    handle = reference.transformer.h[1].register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        with torch.no_grad():
            expected = reference(torch.tensor([ids])).logits[0].numpy()
    finally:
        handle.remove()
    ours = run(loaded.model, ids, [feature_intervention(sae, f)]).numpy()
    np.testing.assert_allclose(ours, expected, atol=TOL, rtol=0)


def test_a_traced_block_rerun_applies_the_edit_once(setup) -> None:
    loaded, _, saes, ids = setup
    sae, _ = saes["resid"]
    iv = feature_intervention(sae, _active_feature(sae, loaded.trace_ids(ids)))
    trace = loaded.trace_ids(ids, CaptureSpec.compact(), interventions=[iv])
    kept, logits = record_sites(loaded.model, ids, {("mlp.out", 1), ("resid_pre", 1)}, [iv])
    np.testing.assert_allclose(trace["blocks.1.resid_pre"], kept[("resid_pre", 1)].numpy(), atol=1e-5)
    np.testing.assert_allclose(trace["blocks.1.mlp.out"], kept[("mlp.out", 1)].numpy(), atol=1e-5)  # re-run
    np.testing.assert_allclose(trace["logits"], logits.numpy(), atol=1e-4)
    acts = sae.activations(trace)
    assert np.abs(acts[:, iv.index]).max() < np.abs(sae.activations(loaded.trace_ids(ids))[:, iv.index]).max()


def test_feature_interventions_are_checked_and_labelled(setup) -> None:
    loaded, _, saes, _ = setup
    sae, _ = saes["resid"]
    iv = feature_intervention(sae, 3, "clamp", 2.5)
    assert iv.label == f"feature 3 ({sae.name}) clamp 2.5" and iv.layer == 1
    assert iv.describe() == {"target": "feature", "layer": 1, "mode": "clamp", "index": 3, "amount": 2.5,
                             "source": sae.name}
    check([iv], loaded.config)
    with pytest.raises(Exception, match="outside 0-47"):
        feature_intervention(sae, 48)
    with pytest.raises(InterventionError, match="needs an amount"):
        feature_intervention(sae, 1, "scale")
    with pytest.raises(InterventionError, match="cannot be 'mean'"):
        feature_intervention(sae, 1, "mean")


def test_analysis_functions(setup) -> None:
    loaded, _, saes, ids = setup
    trace = loaded.trace_ids(ids)
    sae, _ = saes["resid"]
    acts = sae.activations(trace)
    # visible rows first: the same numbers up to float32 rounding (a product of 3 rows is blocked differently
    # from one of every row by some BLAS builds: 1.2e-7 apart seen)
    np.testing.assert_allclose(sae.activations(trace, rows=slice(2, 5)), acts[2:5], rtol=1e-5, atol=1e-6)
    memo = trace_activations(trace, sae)
    assert memo is trace_activations(trace, sae) and np.array_equal(memo, acts)
    from explorer.core.cancel import Cancelled

    with pytest.raises(Cancelled):
        sae.activations(trace, chunk=2, cancel=lambda: True)
    fid, values = top_features(acts, 4, k=5)
    assert list(values) == sorted(values, reverse=True) and (values > 0).all()
    assert set(fid) <= set(np.flatnonzero(acts[4] > 0)) and values[0] == acts[4].max()
    ids_s, cols = strongest_features(acts, k=6)
    assert cols.shape == (len(ids), len(ids_s)) and ids_s[0] == acts.max(0).argmax()
    ids_v, cols_v = strongest_features(acts, k=6, rows=slice(0, 3))
    assert cols_v.shape[0] == 3 and ids_v[0] == acts[:3].max(0).argmax()
    np.testing.assert_array_equal(feature_along(acts, int(ids_s[0])), acts[:, ids_s[0]])
    # reconstruction error by hand
    x = trace["blocks.1.resid_pre"].astype(np.float64)
    recon = acts.astype(np.float64) @ sae.weights["W_dec"].numpy() + sae.weights["b_dec"].numpy()
    rec = reconstruction_error(sae, trace)
    np.testing.assert_allclose(rec.error_norm, np.linalg.norm(x - recon, axis=-1), rtol=1e-4)
    np.testing.assert_allclose(rec.relative, np.linalg.norm(x - recon, axis=-1) / np.linalg.norm(x, axis=-1),
                               rtol=1e-4)
    assert 0 < rec.unexplained


def test_what_a_feature_writes(setup) -> None:
    loaded, reference, saes, _ = setup
    model = loaded.model
    sae, _ = saes["resid"]
    top, tv, bottom, bv = feature_vocab_effect(sae, model, 7, k=5)
    gamma = reference.transformer.ln_f.weight.detach().double().numpy()
    effect = reference.lm_head.weight.detach().double().numpy() @ (gamma * sae.weights["W_dec"][7].double().numpy())
    np.testing.assert_array_equal(top, np.argsort(-effect, kind="stable")[:5])
    np.testing.assert_array_equal(bottom, np.argsort(effect, kind="stable")[:5])
    np.testing.assert_allclose(tv, effect[top], rtol=1e-4, atol=1e-5)
    # an mlp.hook_post feature writes through W_out: a one-hot decoder row is that neuron's vocabulary effect
    from explorer.core.analysis.neurons import neuron_vocab_effect

    mlp_sae, _ = saes["mlp"]
    saved = mlp_sae.weights["W_dec"][2].clone()
    mlp_sae.weights["W_dec"][2] = 0
    mlp_sae.weights["W_dec"][2, 11] = 1
    mlp_sae._on.clear()
    try:
        trace = loaded.trace("hi")
        ours = feature_vocab_effect(mlp_sae, model, 2, k=4)
        theirs = neuron_vocab_effect(trace, 1, 11, k=4)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    finally:
        mlp_sae.weights["W_dec"][2] = saved
        mlp_sae._on.clear()


def test_generation_with_a_feature_off_matches_the_replacement_by_hand(setup) -> None:
    from explorer.core.generation.generate import generate
    from explorer.core.generation.sampling import SamplingParams

    loaded, _, saes, ids = setup
    sae, ref = saes["resid"]
    f = _active_feature(sae, loaded.trace_ids(ids))
    rec = _by_hand_rec(ref, "resid_pre", 1, f, "clamp", 8.0)
    expected, seq = [], list(ids)
    with torch.inference_mode():
        for _ in range(6):                             # greedy, the whole sequence each step, no cache
            nxt = int(loaded.model(torch.tensor([seq]), rec)[0, -1].argmax())
            expected.append(nxt)
            seq.append(nxt)
    params = SamplingParams(temperature=0.0, max_new_tokens=6, stop_at_eos=False)
    iv = feature_intervention(sae, f, "clamp", 8.0)
    for use_cache in (True, False):
        assert generate(loaded, ids, params, use_cache=use_cache, interventions=[iv]).token_ids == expected


def test_what_a_feature_writes_from_a_trace(setup, tmp_path) -> None:
    """The Features panel's read: the trace's own model's weights, memoised; None for a trace without weights."""
    from explorer.core.features.analysis import trace_feature_writes
    from explorer.core.interop import read_trace_safetensors, write_trace_safetensors

    loaded, _, saes, ids = setup
    sae, _ = saes["resid"]
    trace = loaded.trace_ids(ids)
    got = trace_feature_writes(trace, sae, 7, k=5)
    for a, b in zip(got, feature_vocab_effect(sae, loaded.model, 7, k=5)):
        np.testing.assert_array_equal(a, b)
    assert trace_feature_writes(trace, sae, 7, k=5) is got
    write_trace_safetensors(trace, tmp_path / "t.safetensors")
    assert trace_feature_writes(read_trace_safetensors(tmp_path / "t.safetensors"), sae, 7) is None
