"""Gemma, Gemma 2 and Gemma 3 (text and multimodal) checkpoints against transformers on tiny random models.

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
from decoder_reference import GEMMA2, IDS, VOCAB, build, check, save_and_open, spread_weights

from explorer.core.checkpoint import load_checkpoint

pytest.importorskip("transformers")


def test_gemma_scaled_embedding_offset_norms_and_geglu(tmp_path):
    model = build("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma" and cfg.embed_scale == 8.0 and cfg.norm_offset == 1.0
    assert cfg.gated_ffn and cfg.activation == "gelu_tanh" and cfg.tie_embeddings
    check(loaded, model)


def test_gemma2_sandwich_norms_softcaps_and_sliding_window(tmp_path):
    model = build("Gemma2Config", "Gemma2ForCausalLM", **GEMMA2)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma2" and cfg.norm_placement == "sandwich" and cfg.sliding_layers == (0, 2)
    assert (cfg.attn_softcap, cfg.final_softcap, cfg.attn_scale) == (2.0, 30.0, 24 ** -0.5)
    assert any("sliding window of 4" in note for note in loaded.notes)
    check(loaded, model)
    trace = loaded.trace_ids(IDS)
    n = len(IDS)
    # the window is in the mask: on sliding layer 0 the last query sees only the last 4 keys
    scores = trace.head(0, 1, "scores")
    assert np.isneginf(scores[n - 1, : n - 4]).all() and np.isfinite(scores[n - 1, n - 4:]).all()
    assert np.isfinite(trace.head(1, 1, "scores")[n - 1]).all()  # layer 1 sees everything
    # the cap is its own step: pre-cap scores exceed the cap, the capped ones never do
    pre = trace["blocks.0.attn.scores_precap"]
    finite = np.isfinite(pre)
    assert np.abs(pre[finite]).max() > 2.0 and np.abs(trace["blocks.0.attn.scores"][finite]).max() < 2.0
    np.testing.assert_allclose(trace["blocks.0.attn.scores"][finite], 2.0 * np.tanh(pre[finite] / 2.0), atol=1e-6)
    with torch.no_grad():  # the final cap matters too: some logits before it are beyond it
        precap = loaded.model.unembed(loaded.model.ln_final(torch.from_numpy(np.array(trace["resid_final"]))))
    assert precap.abs().max() > 30.0 and np.abs(trace["logits"]).max() < 30.0
    np.testing.assert_allclose(trace["logits"], 30.0 * np.tanh(precap.numpy() / 30.0), atol=1e-5)
    # a transformers 4 config.json has no layer_types: Gemma 2's rule is every even layer
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_checkpoint(tmp_path, device="cpu").config.sliding_layers == (0, 2)


def test_gemma3_text_qk_norms_and_local_global_rope(tmp_path):
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0}}
    model = build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                  sliding_window=4, query_pre_attn_scalar=16, rope_parameters=rope,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "gemma3_text" and cfg.qk_norm == "head" and cfg.sliding_layers == (0, 2)
    assert (cfg.rotary_base, cfg.rotary_base_local, cfg.rope["rope_type"]) == (1000.0, 10.0, "linear")
    check(loaded, model)


def test_gemma3_text_from_a_transformers_4_config(tmp_path):
    """rope_theta, rope_local_base_freq, rope_scaling and sliding_window_pattern as older files have them."""
    import json

    model = build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, head_dim=16, sliding_window=4,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                   "full_attention": {"rope_type": "default", "rope_theta": 100.0}},
                  layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("rope_parameters", "layer_types"):
        config.pop(key)
    config.update(rope_theta=100.0, rope_local_base_freq=10.0, sliding_window_pattern=3)
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.sliding_layers == (0, 1) and loaded.config.rotary_base_local == 10.0
    check(loaded, model)


def test_multimodal_gemma3_opens_as_its_language_model(tmp_path):
    """Gemma 3 4B and larger are Gemma3ForConditionalGeneration files: the text model is checked
    against the whole multimodal model run on token ids (no image)."""
    import transformers

    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, sliding_window=4, max_position_embeddings=64,
                query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3,
                                       eoi_token_index=VOCAB - 2, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    spread_weights(model)
    loaded = save_and_open(model, tmp_path)
    assert loaded.arch == "gemma3" and loaded.config.sliding_layers == (0, 2) and loaded.config.qk_norm == "head"
    assert any("vision tower" in note for note in loaded.notes)
    check(loaded, model)
