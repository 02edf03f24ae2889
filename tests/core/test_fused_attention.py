"""The fused attention kernel (used when nobody records scores or patterns) gives the explicit math's outputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from explorer.core import attention as attention_module
from explorer.core import model as model_module
from explorer.core.config import ModelConfig
from explorer.core.model import KVCache, Transformer, fusable, fused_attention, records_attention
from explorer.core.trace import CaptureSpec, Recorder, capture

SHAPES = {
    "gpt2": dict(vocab_size=50, n_ctx=64, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=64),
    "llama_gqa_rotary": dict(vocab_size=50, n_ctx=64, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=48,
                             n_kv_heads=2, norm="rmsnorm", positions="rotary", activation="silu", gated_ffn=True,
                             attn_bias=False, mlp_bias=False, tie_embeddings=False),
    "partial_rotary_parallel": dict(vocab_size=50, n_ctx=64, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=64,
                                    positions="rotary", rotary_dim=4, parallel_residual=True),
    "encoder": dict(vocab_size=50, n_ctx=64, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=64, causal=False),
}
IDS = [3, 17, 9, 4, 41, 22, 8, 8, 30, 1, 12, 5, 19]


def build(shape: str) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**SHAPES[shape])).eval()


def explicit(model: Transformer, *args, **kwargs) -> torch.Tensor:
    """The forward pass forced through the explicit scores -> pattern -> values path."""
    with torch.inference_mode():
        return model(*args, rec=lambda site, layer, t: t, **kwargs)  # a plain callable: "records everything"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_fused_and_explicit_forward_agree(shape):
    model = build(shape)
    ids = torch.tensor([IDS])
    with torch.inference_mode():
        fused = model(ids)
    assert records_attention(lambda *a: None, 0) and not records_attention(model_module._no_capture, 0)
    assert np.abs(fused.numpy() - explicit(model, ids).numpy()).max() < 1e-5


@pytest.mark.parametrize("shape", ["gpt2", "llama_gqa_rotary"])
def test_fused_and_explicit_agree_with_a_kv_cache(shape):
    model = build(shape)
    ids = torch.tensor([IDS])
    with torch.inference_mode():
        cache_f, cache_e = KVCache(model.cfg.n_layers), KVCache(model.cfg.n_layers)
        model(ids[:, :7], cache=cache_f)
        explicit(model, ids[:, :7], cache=cache_e)
        for i in range(7, len(IDS)):  # one-token steps
            step_f = model(ids[:, i:i + 1], cache=cache_f)
            step_e = explicit(model, ids[:, i:i + 1], cache=cache_e)
            assert np.abs(step_f.numpy() - step_e.numpy()).max() < 1e-5
        whole = model(ids)
    assert np.abs(step_f[0, -1].numpy() - whole[0, -1].numpy()).max() < 1e-4


def test_fused_attention_with_several_new_tokens_after_a_cache():
    """n < m with n > 1: the kernel gets the explicit boolean mask (queries are the last n positions)."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    mask = model_module.causal_mask(3, 9)
    pattern = model_module.attention_pattern(model_module.attention_scores(q, k, mask))
    expected = model_module.weighted_values(pattern, v)
    assert np.abs(fused_attention(q, k, v, mask).numpy() - expected.numpy()).max() < 1e-6


def test_a_recorder_that_stores_scores_gets_the_explicit_path_and_the_same_trace():
    model = build("llama_gqa_rotary")
    full, _ = capture(model, IDS, [str(i) for i in IDS], CaptureSpec.full())
    everything, _ = capture(model, IDS, [str(i) for i in IDS], CaptureSpec.everything())
    assert Recorder(CaptureSpec.everything()).records("attn.pattern", 0)
    assert not Recorder(CaptureSpec.full()).records("attn.pattern", 0)
    for layer in range(model.cfg.n_layers):
        for key in ("attn.z", "attn.out", "resid_mid"):
            a, b = full[f"blocks.{layer}.{key}"], everything[f"blocks.{layer}.{key}"]
            assert np.abs(a - b).max() < 1e-5
        # the derived pattern (explicit math from stored q, k) is the recorded one
        assert np.abs(full[f"blocks.{layer}.attn.pattern"] - everything[f"blocks.{layer}.attn.pattern"]).max() < 1e-6


def test_an_unfusable_mechanism_falls_back_to_the_explicit_math(monkeypatch):
    cfg = ModelConfig(**SHAPES["gpt2"])
    assert fusable(cfg)
    monkeypatch.setattr(attention_module, "UNFUSABLE_ATTENTION", ("causal",))  # any switch that is on
    assert not fusable(cfg)
    calls = []
    monkeypatch.setattr(model_module, "fused_attention", lambda *a: calls.append(a))
    model = Transformer(dataclasses.replace(cfg)).eval()
    with torch.inference_mode():
        model(torch.tensor([IDS]))
    assert calls == []
