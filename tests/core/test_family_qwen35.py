"""Qwen3.5 / 3.6 and Qwen3-Next against transformers on tiny random models (float32): Gated DeltaNet layers beside
attention with an output gate and partial rotary; Qwen3-Next's experts (hybrid_reference.check_hybrid)."""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import build, save_and_open, spread_weights
from hybrid_reference import check_hybrid

from explorer.core.checkpoint.in_memory import from_transformers
from explorer.core.tokenize.base import VocabTokenizer

pytest.importorskip("transformers")

TOKENS = VocabTokenizer([f"w{i}" for i in range(100)], split="words", name="words")
# two q/k heads serving four v heads; 4 layers: DeltaNet, DeltaNet, DeltaNet, attention
QWEN35 = dict(num_hidden_layers=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
              linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4)
LONG = [int(i) for i in np.random.default_rng(3).integers(0, 100, 150)]  # crosses the 64-token chunks


def test_qwen35_deltanet_and_gated_attention(tmp_path):
    model = build("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", **QWEN35)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert [p.mixer for p in cfg.plan] == ["deltanet"] * 3 + ["attention"]
    assert cfg.attn_output_gate and cfg.layer(3).rotary_dim == 4 and cfg.norm_offset == 1.0
    diffs = check_hybrid(loaded, model)
    assert diffs["effective"] <= 1e-5
    check_hybrid(from_transformers(model, TOKENS, device="cpu"), model)


def test_qwen35_past_one_chunk(tmp_path):
    """150 tokens: the chunked form's three chunks (and the effective attention's) against transformers."""
    model = build("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", **{**QWEN35, "max_position_embeddings": 256})
    loaded = save_and_open(model, tmp_path)
    check_hybrid(loaded, model, LONG, steps=3)


def test_qwen3_next_deltanet_with_experts(tmp_path):
    from moe_reference import EAGER, check_routing

    model = build("Qwen3NextConfig", "Qwen3NextForCausalLM", **QWEN35, num_experts=6, num_experts_per_tok=2,
                  moe_intermediate_size=24, shared_expert_intermediate_size=32, mlp_only_layers=[1], **EAGER)
    # the default draw (seed 0) is ill-conditioned: there transformers' own float32 logits are 3e-4 from its float64
    # ones (the DeltaNet's triangular solve amplifies rounding), beyond any float32 comparison's 1e-4
    spread_weights(model, seed=1)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_layers == (0, 2, 3) and cfg.layer(1).ffn == "dense" and cfg.moe_shared_gate
    assert [p.mixer for p in cfg.plan] == ["deltanet"] * 3 + ["attention"]
    check_hybrid(loaded, model)
    check_routing(loaded, model)
    check_hybrid(from_transformers(model, TOKENS, device="cpu"), model)


def test_qwen35_multimodal_file_opens_as_its_language_model(tmp_path):
    import torch
    import transformers
    from decoder_reference import SMALL

    text = {**{k: v for k, v in SMALL.items() if k != "attn_implementation"}, **QWEN35}
    vision = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=8,
                  num_position_embeddings=16)
    torch.manual_seed(0)
    config = transformers.Qwen3_5Config(text_config=text, vision_config=vision, attn_implementation="eager")
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    spread_weights(model)
    loaded = save_and_open(model, tmp_path)
    assert loaded.arch == "qwen3_5" and [p.mixer for p in loaded.config.plan][-1] == "attention"
    check_hybrid(loaded, model)
