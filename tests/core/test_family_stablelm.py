"""StableLM checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import pytest
from decoder_reference import build, check, save_and_open

pytest.importorskip("transformers")


@pytest.mark.parametrize("parallel", [False, True])
def test_stablelm_partial_rotary_layernorm_qkv_bias_and_per_head_qk_norms(tmp_path, parallel):
    model = build("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2, use_qkv_bias=True,
                  qk_layernorm=True, use_parallel_residual=parallel, partial_rotary_factor=0.25)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "stablelm" and cfg.norm == "layernorm" and cfg.rotary_dim == 4
    assert cfg.qk_norm == "per_head" and cfg.parallel_residual is parallel and cfg.attn_out_bias is False
    check(loaded, model)


def test_stablelm_plain(tmp_path):
    model = build("StableLmConfig", "StableLmForCausalLM", partial_rotary_factor=0.5, tie_word_embeddings=True)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.rotary_dim == 8 and loaded.config.qk_norm == "none" and loaded.config.tie_embeddings
    check(loaded, model)
