"""SmolLM3, OLMo 3, EXAONE 4 and Mistral Small 3 (mistral3) against transformers on tiny random models (float32):
hybrid_reference.check_hybrid (logits, patterns, the stream after every layer, greedy tokens with and without the
cache and transformers' generate)."""

from __future__ import annotations

import pytest
from decoder_reference import build, save_and_open
from hybrid_reference import check_hybrid

pytest.importorskip("transformers")


def test_smollm3_nope_every_fourth_layer(tmp_path):
    model = build("SmolLM3Config", "SmolLM3ForCausalLM", num_hidden_layers=4, num_key_value_heads=2, pad_token_id=0)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.nope_layers == (3,) and [p.rotary for p in loaded.config.plan] == [True, True, True, False]
    check_hybrid(loaded, model)


def test_smollm3_sliding_nope_layers(tmp_path):
    model = build("SmolLM3Config", "SmolLM3ForCausalLM", num_hidden_layers=4, num_key_value_heads=2, pad_token_id=0,
                  no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=4)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.sliding_layers == (1, 3) and loaded.config.nope_layers == (1, 3)
    check_hybrid(loaded, model)


def test_olmo3_sliding_layers_and_yarn_on_the_full_ones(tmp_path):
    rope = {"full_attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                               "rope_theta": 500.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}
    model = build("Olmo3Config", "Olmo3ForCausalLM", num_hidden_layers=4, num_key_value_heads=2, sliding_window=4,
                  rope_parameters=rope)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.sliding_layers == (0, 1, 2) and cfg.rope["rope_type"] == "yarn"
    assert [p.local_rope for p in cfg.plan] == [True, True, True, False]
    check_hybrid(loaded, model)


def test_exaone4_sliding_rotary_layers_and_global_nope(tmp_path):
    model = build("Exaone4Config", "Exaone4ForCausalLM", num_hidden_layers=4, num_key_value_heads=2, sliding_window=4,
                  sliding_window_pattern=4)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.sliding_layers == (0, 1, 2) and cfg.nope_layers == (3,) and cfg.norm_placement == "output"
    check_hybrid(loaded, model)


@pytest.mark.parametrize("tied", [True, False])
def test_mistral3_text_model_inside_its_vision_wrapper(tmp_path, tied):
    import torch
    import transformers
    from decoder_reference import SMALL, spread_weights

    text = {k: v for k, v in SMALL.items() if k != "attn_implementation"}
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=32,
                  patch_size=16, head_dim=16)
    torch.manual_seed(0)
    config = transformers.Mistral3Config(text_config={**text, "num_key_value_heads": 2, "sliding_window": None},
                                         vision_config=vision, tie_word_embeddings=tied, attn_implementation="eager")
    model = transformers.Mistral3ForConditionalGeneration(config).eval()
    spread_weights(model)
    loaded = save_and_open(model, tmp_path)
    assert loaded.arch == "mistral3" and loaded.config.tie_embeddings is tied and loaded.config.kv_heads == 2
    check_hybrid(loaded, model)
