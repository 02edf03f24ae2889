"""OLMo and OLMo 2 checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, check, save_and_open

pytest.importorskip("transformers")


@pytest.mark.parametrize("clip", [None, 0.5])
def test_olmo_parameter_free_layernorm_and_qkv_clipping(tmp_path, clip):
    model = build("OlmoConfig", "OlmoForCausalLM", clip_qkv=clip)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "olmo" and cfg.norm == "layernorm" and not cfg.norm_affine and cfg.qkv_clip == clip
    assert loaded.model.blocks[0].ln1.weight is None
    check(loaded, model, final_norm=True)
    if clip is not None:
        assert np.abs(loaded.trace_ids(IDS)["blocks.0.attn.v"]).max() <= clip


def test_olmo2_output_norms_and_whole_projection_qk_norms(tmp_path):
    model = build("Olmo2Config", "Olmo2ForCausalLM", num_key_value_heads=2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "olmo2" and cfg.norm_placement == "output" and cfg.qk_norm == "full"
    assert loaded.model.blocks[0].ln1 is None and loaded.model.blocks[0].ln1_out is not None
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert trace["blocks.0.attn.q_norm.mean_square"].shape == (len(IDS),)
    assert "blocks.0.ln1_out.mean_square" in trace.keys()
