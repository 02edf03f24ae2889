"""Gemma 4 against transformers on tiny random models (float32): sliding and global layers with their own head
sizes and K/V heads, K = V on the global layers, v norms, proportional RoPE, KV sharing across the last layers
(with the wider FFN), per-layer embeddings, the layer scalars, the final soft cap (hybrid_reference.check_hybrid)."""

from __future__ import annotations

import pytest
import torch
from decoder_reference import build, save_and_open
from hybrid_reference import check_hybrid

from explorer.core.checkpoint.in_memory import from_transformers
from explorer.core.tokenize.base import VocabTokenizer

pytest.importorskip("transformers")

TOKENS = VocabTokenizer([f"w{i}" for i in range(100)], split="words", name="words")
LAYERS = ["sliding_attention", "sliding_attention", "full_attention"] * 2
GEMMA4 = dict(num_hidden_layers=6, num_key_value_heads=2, head_dim=16, global_head_dim=32,
              num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2, sliding_window=4,
              vocab_size_per_layer_input=100, hidden_size_per_layer_input=8, use_double_wide_mlp=True,
              final_logit_softcapping=30.0, layer_types=LAYERS, pad_token_id=0)


def gemma4(**overrides):
    model = build("Gemma4TextConfig", "Gemma4ForCausalLM", **{**GEMMA4, **overrides})
    with torch.no_grad():  # the layer scalars (buffers, 1 at init) as a trained model has them
        for i, layer in enumerate(model.model.layers):
            layer.layer_scalar.fill_(0.5 + 0.25 * i)
    return model


def test_gemma4_every_per_layer_switch(tmp_path):
    model = gemma4()
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    plans = cfg.plan
    assert [p.attention for p in plans] == ["sliding", "sliding", "full"] * 2
    assert [(p.d_head, p.n_kv_heads, p.k_eq_v) for p in plans[1:3]] == [(16, 2, False), (32, 1, True)]
    assert [p.kv_from for p in plans] == [None, None, None, None, 3, 2]
    assert [p.d_ff for p in plans] == [96] * 4 + [192] * 2 and cfg.rope["rope_type"] == "proportional"
    check_hybrid(loaded, model)
    check_hybrid(from_transformers(model, TOKENS, device="cpu"), model)


def test_gemma4_without_sharing_or_per_layer_embeddings(tmp_path):
    model = gemma4(num_kv_shared_layers=0, hidden_size_per_layer_input=0, attention_k_eq_v=False,
                   use_double_wide_mlp=False, final_logit_softcapping=None)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.d_per_layer == 0 and all(p.kv_from is None for p in loaded.config.plan)
    check_hybrid(loaded, model)


def test_gemma4_multimodal_file_opens_as_its_language_model(tmp_path):
    import transformers
    from decoder_reference import SMALL, spread_weights

    text = {**{k: v for k, v in SMALL.items() if k != "attn_implementation"}, **GEMMA4}
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, position_embedding_size=16)
    torch.manual_seed(0)
    config = transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=None,
                                       attn_implementation="eager")
    model = transformers.Gemma4ForConditionalGeneration(config).eval()
    spread_weights(model)
    loaded = save_and_open(model, tmp_path)
    assert loaded.arch == "gemma4" and loaded.config.kv_shared_layers == 2
    check_hybrid(loaded, model)


def test_gemma4_last_position_skips_the_sharing_layers_other_positions(tmp_path):
    """Generation un-embeds only the last position; from the first KV-sharing layer on nothing else is needed
    (those layers write no keys or values), so only the last position runs there: the same logits."""
    from decoder_reference import IDS

    loaded = save_and_open(gemma4(), tmp_path)
    with torch.inference_mode():
        whole = loaded.model(torch.tensor([IDS]))[0, -1]
        last = loaded.model(torch.tensor([IDS]), last_only=True)[0, -1]
    assert torch.allclose(whole, last, atol=1e-5)
