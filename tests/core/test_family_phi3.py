"""Phi-3 checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from decoder_reference import IDS, TOL, compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


PHI3 = {"pad_token_id": 0}


@pytest.mark.parametrize("extra", [{"num_key_value_heads": 2, "sliding_window": 5},
                                   {"num_key_value_heads": 4, "sliding_window": None, "partial_rotary_factor": 0.5,
                                    "tie_word_embeddings": True}])
def test_phi3_matches_reference(tmp_path, extra):
    model, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **{**PHI3, **extra})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "phi3" and cfg.kv_heads == extra["num_key_value_heads"]
    assert cfg.sliding_window == extra["sliding_window"]
    compare(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    if extra["sliding_window"]:  # the window is in the mask: the last query sees exactly W keys
        assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == 5
    else:
        assert cfg.rotary_dim == 8
        assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == len(IDS)


def test_phi3_longrope_matches_reference(tmp_path):
    """LongRoPE with an original context of 8: the 16-token prompt uses the long factors, a 6-token one
    the short factors; cos and sin are scaled by the attention factor sqrt(1 + ln 8 / ln 8)."""
    gen = torch.Generator().manual_seed(1)
    short, long = 1.0 + 3 * torch.rand(8, generator=gen), 1.0 + 3 * torch.rand(8, generator=gen)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short.tolist(),
            "long_factor": (long * 4).tolist(), "original_max_position_embeddings": 8}
    model, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **{**PHI3, "rope_parameters": rope,
                                                                     "original_max_position_embeddings": 8})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert cfg.rope["rope_type"] == "longrope" and cfg.rope["max_position_embeddings"] == 64
    assert any("LongRoPE" in note for note in loaded.notes)
    compare(loaded, model)  # 16 tokens: beyond the original context, the long factors
    with torch.no_grad():  # 6 tokens: within it, the short factors
        ref = model(torch.tensor([IDS[:6]])).logits[0].numpy()
    assert np.abs(loaded.trace_ids(IDS[:6])["logits"] - ref).max() < TOL


def test_phi3_longrope_with_the_wrong_number_of_factors_is_refused(tmp_path):

    _, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **PHI3)
    config = json.loads((path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["original_max_position_embeddings"] = 8
    config["rope_scaling"] = {"type": "su", "short_factor": [1.0] * 5, "long_factor": [2.0] * 5}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="short_factor has 5 factors.*need 8"):
        load_checkpoint(path)
