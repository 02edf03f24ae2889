"""Falcon checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, TOL, compare, ours_greedy, reference_greedy, score_difference
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


FALCON = {"pad_token_id": 0}


FALCON_VARIANTS = {
    "falcon-7b-like": ({"multi_query": True, "parallel_attn": True}, 1, True),
    "falcon-40b-like": ({"new_decoder_architecture": True, "num_kv_heads": 2}, 2, False),
    "sequential-with-bias": ({"multi_query": False, "parallel_attn": False, "bias": True}, 4, False),
}


FALCON_RW = {"alibi": True, "multi_query": False, "parallel_attn": False, "bias": True}


@pytest.mark.parametrize("variant", list(FALCON_VARIANTS))
def test_falcon_matches_reference(tmp_path, variant):
    extra, kv_heads, shared = FALCON_VARIANTS[variant]
    model, path = build("FalconConfig", "FalconForCausalLM", tmp_path, **{**FALCON, **extra})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "falcon" and cfg.kv_heads == kv_heads and cfg.shared_norm is shared
    assert cfg.parallel_residual is extra.get("parallel_attn", True) and not cfg.alibi
    compare(loaded, model)


def test_falcon_rw_adds_alibi_before_the_scale(tmp_path):
    """Falcon-RW: scores = (q.k + ALiBi bias) / sqrt(d_head). transformers 5's eager Falcon path adds the
    bias twice (once in the attention, once more through the mask it builds), its SDPA path once, as
    the original model and transformers 4 did; so logits, hidden states and greedy tokens are compared
    with the SDPA path, and the patterns with their definition computed from the stored q and k."""
    from explorer.core.model import alibi_bias

    model, path = build("FalconConfig", "FalconForCausalLM", tmp_path, **{**FALCON, **FALCON_RW})
    model.config._attn_implementation = "sdpa"  # the reference path (see the docstring)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert cfg.alibi and cfg.alibi_before_scale and cfg.positions == "none" and not cfg.parallel_residual
    with torch.no_grad():
        ref = model(torch.tensor([IDS]), output_hidden_states=True)
    full = loaded.trace_ids(IDS, CaptureSpec.everything())
    assert np.abs(full["logits"] - ref.logits[0].numpy()).max() < TOL
    assert float(ref.logits.abs().max()) > 1.0
    for i in range(cfg.n_layers):
        assert np.abs(full[f"blocks.{i}.resid_pre"] - ref.hidden_states[i][0].numpy()).max() < TOL
    compact = loaded.trace_ids(IDS, CaptureSpec.compact())
    n, lower = len(IDS), np.tril(np.ones((len(IDS), len(IDS)), dtype=bool))
    for i in range(cfg.n_layers):
        q, k = full[f"blocks.{i}.attn.q"], full[f"blocks.{i}.attn.k"]
        for h in range(cfg.n_heads):
            expected = np.where(lower, (q[h] @ k[h].T + alibi_bias(4, n, n).numpy()[h]) / np.sqrt(cfg.d_head), -np.inf)
            pattern = np.exp(expected - expected.max(-1, keepdims=True))
            pattern /= pattern.sum(-1, keepdims=True)
            assert np.abs(full[f"blocks.{i}.attn.pattern"][h] - pattern).max() < TOL
            assert np.abs(compact.head(i, h) - pattern).max() < TOL
            assert score_difference(compact.head(i, h, "scores"), expected) < TOL
    expected_ids = reference_greedy(model, IDS, 6)
    assert ours_greedy(loaded, IDS, 6) == expected_ids
    assert ours_greedy(loaded, IDS, 6, use_cache=False) == expected_ids
