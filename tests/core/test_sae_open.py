"""Opening SAELens directories: our encoding equals sae_lens' SAE.encode on tiny random SAEs of each
architecture, normalisation and hook point, written with sae_lens at test time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sae_reference import write_sae

from explorer.core.features.sae import SAEModelMismatch, open_sae

pytestmark = pytest.mark.recent_reference  # compares with sae_lens (needs NumPy 2: not in the floors step)

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
TOL = 1e-5


@pytest.fixture(scope="module")
def traced(tiny_gpt2):
    loaded, _ = tiny_gpt2
    return loaded, loaded.trace(PROMPT)


def _compare(ours, ref, x_ref: torch.Tensor) -> None:
    expected = ref.encode(x_ref).detach().numpy().reshape(-1, ours.d_sae)
    got = ours.encode(x_ref.reshape(x_ref.shape[0], -1)).numpy()
    assert (expected > 0).sum() > 0, "the random SAE should have some active features"
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["standard", "jumprelu", "topk", "gated"])
@pytest.mark.parametrize("norm", ["none", "expected_average_only_in"])
@pytest.mark.parametrize("b_dec", [True, False])
def test_activations_equal_sae_lens_encode(tmp_path, traced, arch, norm, b_dec) -> None:
    loaded, trace = traced
    extra = {"k": 7} if arch == "topk" else {}
    ref = write_sae(tmp_path, arch, "blocks.1.hook_resid_pre", 64, 96, apply_b_dec_to_input=b_dec,
                    normalize_activations=norm, **extra)
    sae = open_sae(tmp_path, loaded.config, loaded.name, allow_other_model=True)
    assert (sae.architecture, sae.hook.key, sae.d_sae) == (arch, "blocks.1.resid_pre", 96)
    x = sae.input_of(trace)
    np.testing.assert_array_equal(x, trace["blocks.1.resid_pre"])
    _compare(sae, ref, torch.from_numpy(x))
    acts = sae.activations(trace)
    assert acts.dtype == np.float32 and acts.shape == (trace.n_tokens, 96)
    np.testing.assert_allclose(acts, ref.encode(torch.from_numpy(x)).detach().numpy(), atol=TOL, rtol=0)
    np.testing.assert_allclose(sae.decode(acts).numpy(), ref.decode(torch.from_numpy(acts)).detach().numpy(),
                               atol=TOL, rtol=0)
    if arch == "topk":
        assert ((acts > 0).sum(-1) <= 7).all()


def test_topk_rescaled_by_decoder_norm(tmp_path, traced) -> None:
    loaded, trace = traced
    ref = write_sae(tmp_path, "topk", "blocks.0.hook_mlp_out", 64, 80, k=5, rescale_acts_by_decoder_norm=True)
    sae = open_sae(tmp_path, loaded.config, loaded.name, allow_other_model=True)
    x = torch.from_numpy(sae.input_of(trace))
    _compare(sae, ref, x)
    acts = sae.encode(x)
    np.testing.assert_allclose(sae.decode(acts).numpy(), ref.decode(acts).detach().numpy(), atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["standard", "jumprelu"])
def test_hook_z_sae_reads_the_heads_outputs_flattened(tmp_path, traced, arch) -> None:
    loaded, trace = traced
    cfg = loaded.config
    ref = write_sae(tmp_path, arch, "blocks.2.attn.hook_z", cfg.n_heads * cfg.d_head, 72,
                    reshape_activations="hook_z")
    sae = open_sae(tmp_path, cfg, loaded.name, allow_other_model=True)
    z = trace["blocks.2.attn.z"]                                       # ours [H, n, dh]
    x_ref = torch.from_numpy(np.ascontiguousarray(z.transpose(1, 0, 2)))  # TL's [n, H, dh]
    np.testing.assert_allclose(sae.activations(trace), ref.encode(x_ref).detach().numpy(), atol=TOL, rtol=0)


def test_hook_points_map_to_trace_keys(tmp_path, traced) -> None:
    loaded, trace = traced
    cfg = loaded.config
    cases = {"blocks.0.hook_resid_post": ("blocks.1.resid_pre", 64), "blocks.2.hook_resid_post": ("resid_final", 64),
             "blocks.1.hook_resid_mid": ("blocks.1.resid_mid", 64), "blocks.1.hook_attn_out": ("blocks.1.attn.out", 64),
             "blocks.2.mlp.hook_post": ("blocks.2.mlp.post", cfg.d_ff)}
    for i, (hook, (key, width)) in enumerate(cases.items()):
        directory = tmp_path / str(i)
        ref = write_sae(directory, "standard", hook, width, 40, seed=i)
        sae = open_sae(directory, cfg, loaded.name, allow_other_model=True)
        assert sae.hook.key == key
        x = torch.from_numpy(trace[key].astype(np.float32))
        np.testing.assert_allclose(sae.activations(trace), ref.encode(x).detach().numpy(), atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["transcoder", "jumprelu_transcoder"])
def test_transcoders_encode_like_sae_lens(tmp_path, traced, arch) -> None:
    loaded, trace = traced
    ref = write_sae(tmp_path, arch, "blocks.1.hook_resid_mid", 64, 50, d_out=64, apply_b_dec_to_input=False,
                    hook_name_out="blocks.1.hook_mlp_out")
    sae = open_sae(tmp_path, loaded.config, loaded.name, allow_other_model=True)
    assert sae.is_transcoder and sae.hook_out.key == "blocks.1.mlp.out"
    x = torch.from_numpy(sae.input_of(trace))
    _compare(sae, ref, x)
    np.testing.assert_allclose(sae.decode(sae.encode(x)).numpy(), ref.decode(ref.encode(x)).detach().numpy(),
                               atol=TOL, rtol=0)


def test_several_saes_at_once_on_different_layers(tmp_path, traced) -> None:
    loaded, trace = traced
    saes = []
    for layer in range(3):
        write_sae(tmp_path / str(layer), "standard", f"blocks.{layer}.hook_resid_pre", 64, 32 + layer, seed=layer)
        saes.append(open_sae(tmp_path / str(layer), loaded.config, loaded.name, allow_other_model=True))
    assert [s.hook.key for s in saes] == [f"blocks.{i}.resid_pre" for i in range(3)]
    assert [s.activations(trace).shape[1] for s in saes] == [32, 33, 34]


def test_model_name_mismatch_is_a_warning_the_caller_can_override(tmp_path, traced) -> None:
    loaded, _ = traced
    write_sae(tmp_path, "standard", "blocks.0.hook_resid_pre", 64, 16, model_name="gemma-2-2b")
    with pytest.raises(SAEModelMismatch, match="trained on 'gemma-2-2b'"):
        open_sae(tmp_path, loaded.config, "gpt2-small")
    sae = open_sae(tmp_path, loaded.config, "gpt2-small", allow_other_model=True)
    assert sae.warnings and "gemma-2-2b" in sae.warnings[0]
    assert open_sae(tmp_path, loaded.config, "google/gemma-2-2b").warnings == []
