"""Phi-1/1.5/2 checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import pytest
from decoder_reference import IDS, compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError

pytest.importorskip("transformers")


def test_phi_parallel_block_with_one_norm_matches_reference(tmp_path):
    model, path = build("PhiConfig", "PhiForCausalLM", tmp_path, partial_rotary_factor=0.5, pad_token_id=0)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "phi" and cfg.shared_norm and cfg.parallel_residual and cfg.unembed_bias
    assert cfg.rotary_dim == 8 and loaded.model.blocks[0].ln2 is None
    compare(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert "blocks.0.ln1.mean" in trace and "blocks.0.ln2.mean" not in trace


def test_phi_with_qk_layernorm_is_refused(tmp_path):
    _, path = build("PhiConfig", "PhiForCausalLM", tmp_path, qk_layernorm=True, pad_token_id=0)
    with pytest.raises(CheckpointError, match="qk_layernorm"):
        load_checkpoint(path)
