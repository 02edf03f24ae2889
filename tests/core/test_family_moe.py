"""Mixture-of-experts families against transformers on tiny random models (float32).

Each model is built from its transformers Config class (tiny, random, eager attention and experts), saved
with save_pretrained (the hub's per-expert tensors) and opened from the directory; some are also opened from
memory (transformers' fused expert tensors). ``moe_reference.check_moe``: logits <= 1e-4, router logits and
attention patterns <= 1e-5, the same chosen experts with the same weights, greedy tokens equal with and
without the KV cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_reference import IDS, build, save_and_open
from moe_reference import EAGER, check_moe

from explorer.core.checkpoint.in_memory import from_transformers
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")

TOKENS = VocabTokenizer([f"w{i}" for i in range(100)], split="words", name="words")


def from_memory(model):
    return from_transformers(model, TOKENS, device="cpu")


def test_mixtral_softmax_top2_renormalised(tmp_path):
    model = build("MixtralConfig", "MixtralForCausalLM", num_key_value_heads=2, num_local_experts=4,
                  num_experts_per_tok=2, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "mixtral" and cfg.moe_layers == (0, 1) and cfg.n_experts == 4 and cfg.moe_norm_topk
    check_moe(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert np.allclose(trace["blocks.0.moe.weights"].sum(-1), 1.0, atol=1e-6)   # renormalised over the two
    check_moe(from_memory(model), model)


def test_mixtral_sliding_window(tmp_path):
    model = build("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2,
                  sliding_window=4, **EAGER)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.sliding_layers == (0, 1) and loaded.config.sliding_window == 4
    check_moe(loaded, model)


def test_qwen3_moe_with_a_dense_layer(tmp_path):
    model = build("Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                  num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=True,
                  mlp_only_layers=[1], **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_layers == (0, 2) and cfg.layer(1).ffn == "dense" and cfg.qk_norm == "head" and cfg.d_expert == 24
    check_moe(loaded, model)
    check_moe(from_memory(model), model)


def test_qwen2_moe_shared_expert_with_sigmoid_gate(tmp_path):
    model = build("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_key_value_heads=2, num_experts=6, num_experts_per_tok=2,
                  moe_intermediate_size=24, shared_expert_intermediate_size=40, norm_topk_prob=False, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.d_shared == 40 and cfg.moe_shared_gate and cfg.attn_bias and cfg.attn_out_bias is False
    check_moe(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.everything())
    # what the block adds: the chosen experts' weighted outputs plus the gated shared expert
    total = trace["blocks.1.moe.expert_out"].sum(1) + trace["blocks.1.moe.shared_out"]
    assert np.abs(total - trace["blocks.1.mlp.out"]).max() < 1e-5
    check_moe(from_memory(model), model)


def test_olmoe_full_qk_norms_and_clip(tmp_path):
    model = build("OlmoeConfig", "OlmoeForCausalLM", num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                  intermediate_size=32, clip_qkv=1.5, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert loaded.arch == "olmoe" and cfg.qk_norm == "full" and cfg.qkv_clip == 1.5 and not cfg.moe_norm_topk
    check_moe(loaded, model)


def test_granitemoe_topk_then_softmax_with_multipliers(tmp_path):
    model = build("GraniteMoeConfig", "GraniteMoeForCausalLM", num_key_value_heads=2, num_local_experts=6,
                  num_experts_per_tok=2, embedding_multiplier=3.0, attention_multiplier=0.2, residual_multiplier=0.7,
                  logits_scaling=2.0, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_router == "topk_softmax" and cfg.residual_scale == 0.7 and cfg.logit_scale == 0.5
    check_moe(loaded, model)
    check_moe(from_memory(model), model)


def test_phimoe_sparsemixer_layernorms_and_head_bias(tmp_path):
    model = build("PhimoeConfig", "PhimoeForCausalLM", num_key_value_heads=2, num_local_experts=6,
                  num_experts_per_tok=2, router_jitter_noise=0.3, attention_bias=True, lm_head_bias=True, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_router == "sparsemixer" and cfg.norm == "layernorm" and cfg.unembed_bias and cfg.moe_jitter == 0.3
    check_moe(loaded, model)
    trace = loaded.trace_ids(IDS)
    # the jitter's band lets several experts share the first softmax: weights below 1 that do not sum to 1
    assert (trace["blocks.0.moe.weights"][:, 0] < 0.999).any()
    check_moe(from_memory(model), model)


def test_gpt_oss_sinks_sliding_yarn_and_clamped_experts(tmp_path):
    model = build("GptOssConfig", "GptOssForCausalLM", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                  num_local_experts=6, num_experts_per_tok=2, sliding_window=4, swiglu_limit=1.5, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.attn_sinks and cfg.sliding_layers == (0, 2) and cfg.rope["rope_type"] == "yarn" and cfg.moe_glu_limit == 1.5
    check_moe(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    for layer in range(3):
        pattern, sink = trace[f"blocks.{layer}.attn.pattern"], trace[f"blocks.{layer}.attn.sink"]
        assert np.abs(pattern.sum(-1) + sink - 1.0).max() < 1e-5 and sink.min() > 0   # a row sums to one with its sink
    check_moe(from_memory(model), model)


def _choice_bias(model, seed: int = 1) -> None:
    """DeepSeek-V3's and GLM-4.5's e_score_correction_bias is a buffer (transformers leaves it at 0): draw it."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_(0.3 * torch.randn(bias.shape, generator=gen))


MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12, num_key_value_heads=4)


@pytest.mark.parametrize("interleave, q_rank", [(True, 24), (False, None)])
def test_deepseek_v3_latent_attention_group_limited_sigmoid_routing(tmp_path, interleave, q_rank):
    model = build("DeepseekV3Config", "DeepseekV3ForCausalLM", num_hidden_layers=3, n_routed_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=2, first_k_dense_replace=1,
                  n_group=4, topk_group=2, routed_scaling_factor=2.5, rope_interleave=interleave, q_lora_rank=q_rank,
                  **MLA, **EAGER)
    _choice_bias(model)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_layers == (1, 2) and cfg.layer(0).ffn == "dense" and cfg.kv_lora_rank == 16 and cfg.d_head == 16
    assert cfg.moe_router == "sigmoid_topk" and cfg.moe_groups == 4 and cfg.d_shared == 48 and cfg.moe_scale == 2.5
    check_moe(loaded, model)
    check_moe(from_memory(model), model)


def test_deepseek_v3_yarn_scales_the_scores(tmp_path):
    rope = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
                mscale=1.0, mscale_all_dim=1.0, beta_fast=32, beta_slow=1)
    model = build("DeepseekV3Config", "DeepseekV3ForCausalLM", n_routed_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=24, first_k_dense_replace=0, n_group=1, topk_group=1, q_lora_rank=None,
                  rope_parameters=rope, **MLA, **EAGER)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.attn_scale > 16 ** -0.5 and loaded.config.rope["rope_type"] == "yarn"
    check_moe(loaded, model)


def test_deepseek_v2_greedy_and_group_limited_softmax(tmp_path):
    for method, groups in (("greedy", None), ("group_limited_greedy", 2)):
        model = build("DeepseekV2Config", "DeepseekV2ForCausalLM", n_routed_experts=8, num_experts_per_tok=3,
                      moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=1, topk_method=method,
                      n_group=groups, topk_group=1 if groups else None, routed_scaling_factor=1.5, q_lora_rank=None,
                      **MLA, **EAGER)
        loaded = save_and_open(model, tmp_path / method)
        cfg = loaded.config
        assert cfg.moe_router == "softmax_topk" and not cfg.moe_norm_topk and cfg.rotary_interleaved
        assert cfg.moe_groups == (groups or 1)
        check_moe(loaded, model)


def test_glm4_moe_partial_rotary_qk_norm_and_shared_experts(tmp_path):
    model = build("Glm4MoeConfig", "Glm4MoeForCausalLM", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                  n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=1,
                  first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=1.8, use_qk_norm=True,
                  attention_bias=True, **EAGER)
    _choice_bias(model)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.rotary_dim == 8 and cfg.qk_norm == "head" and cfg.attn_bias and cfg.attn_out_bias is False
    check_moe(loaded, model)
    check_moe(from_memory(model), model)


def test_llama4_moe_between_dense_chunked_nope_layers(tmp_path):
    model = build("Llama4TextConfig", "Llama4ForCausalLM", num_hidden_layers=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=24, intermediate_size_mlp=40, num_local_experts=4, num_experts_per_tok=2,
                  interleave_moe_layer_step=2, no_rope_layer_interval=2, attention_chunk_size=4, floor_scale=4,
                  attn_scale=0.3, **EAGER)
    loaded = save_and_open(model, tmp_path)
    cfg = loaded.config
    assert cfg.moe_layers == (1, 3) and cfg.nope_layers == (1, 3) and cfg.chunked_layers == (0, 2)
    assert [p.temperature for p in cfg.plan] == [False, True, False, True] and cfg.qk_norm_layers == (0, 2)
    check_moe(loaded, model)
    check_moe(from_memory(model), model)


def test_phimoe_longrope_with_its_own_scales(tmp_path):
    rope = dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0 + 0.1 * i for i in range(8)],
                long_factor=[2.0 + 0.3 * i for i in range(8)], short_mscale=1.1, long_mscale=1.3,
                original_max_position_embeddings=8)
    model = build("PhimoeConfig", "PhimoeForCausalLM", num_key_value_heads=2, num_local_experts=4,
                  num_experts_per_tok=2, rope_parameters=rope, **EAGER)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.rope["long_mscale"] == 1.3
    check_moe(loaded, model)                    # 14 tokens: past the original context, the long scale


@pytest.mark.parametrize("config, cls, kw", [
    ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("GptOssConfig", "GptOssForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16,
                                               sliding_window=4)),
    ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
                                                       moe_intermediate_size=24, n_group=2, topk_group=1, **MLA)),
    ("Llama4TextConfig", "Llama4ForCausalLM", dict(num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=40,
                                                   interleave_moe_layer_step=2, attention_chunk_size=4)),
])
def test_verify_passes_on_moe_directories(tmp_path, config, cls, kw):
    from explorer.core.verify import verify_checkpoint

    model = build(config, cls, **kw)               # the reference runs transformers' default experts kernel
    model.save_pretrained(tmp_path)
    report = verify_checkpoint(tmp_path, ids=IDS)
    assert report.passed, report.lines()
    assert report.logits is not None and all(row.pattern is not None for row in report.layers[1:])
