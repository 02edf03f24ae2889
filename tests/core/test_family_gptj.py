"""GPT-J checkpoints and the interleaved rotary layout against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import pytest
import torch
from decoder_reference import compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint

pytest.importorskip("transformers")


def test_gptj_interleaved_partial_rotary_matches_reference(tmp_path):
    model, path = build("GPTJConfig", "GPTJForCausalLM", tmp_path, rotary_dim=8, pad_token_id=0)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "gptj" and cfg.rotary_interleaved and cfg.rotary_dim == 8 and cfg.shared_norm
    compare(loaded, model)


def test_interleaved_rotary_turns_adjacent_pairs():
    from explorer.core.model import (
        apply_rotary,
        apply_rotary_interleaved,
        rotary_angles,
    )

    cos, sin = rotary_angles(torch.arange(5), 4, 10000.0)
    x = torch.randn(1, 1, 5, 6)
    y = apply_rotary_interleaved(x, cos, sin)
    assert torch.equal(y[..., 4:], x[..., 4:])  # the dimensions past rotary_dim pass through
    # the same rotation as the half layout once the pairs are gathered: (x0, x2 | x1, x3) <-> (x0, x1, x2, x3)
    half = apply_rotary(x[..., [0, 2, 1, 3, 4, 5]], cos, sin)
    assert torch.allclose(y, half[..., [0, 2, 1, 3, 4, 5]], atol=1e-6)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths
