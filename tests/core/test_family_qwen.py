"""Qwen2 / Qwen2.5 and Qwen3 checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import pytest
from decoder_reference import IDS, build, check, save_and_open

pytest.importorskip("transformers")


def test_qwen2_qkv_bias_without_output_bias(tmp_path):
    model = build("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "qwen2" and cfg.attn_bias and cfg.attn_out_bias is False and cfg.kv_heads == 2
    assert loaded.model.blocks[0].attn.W_O.bias is None and loaded.model.blocks[0].attn.W_Q.bias is not None
    check(loaded, model)


def test_qwen2_sliding_window_layers(tmp_path):
    model = build("Qwen2Config", "Qwen2ForCausalLM", num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                  max_window_layers=1)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.sliding_layers == (1, 2) and loaded.config.sliding_window == 4
    check(loaded, model)


def test_qwen3_per_head_qk_norms(tmp_path):
    model = build("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "qwen3" and cfg.qk_norm == "head" and cfg.d_head == 32 and cfg.tie_embeddings
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert trace["blocks.1.attn.q_norm.mean_square"].shape == (4, len(IDS))  # [H, n]
    assert trace["blocks.1.attn.k_norm.mean_square"].shape == (2, len(IDS))  # [Hkv, n]
