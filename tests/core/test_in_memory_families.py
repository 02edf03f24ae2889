"""``explorer.show(model)``'s core path for every model type that opens from a directory.

``explorer.show`` registers a ``transformers`` model as a ``memory:N`` source and the window opens
it with ``load_checkpoint``, which converts it through ``from_transformers`` and the family registry
the directory loader uses. Each family's tiny random model (unit-scale weights, as in the
directory tests) is opened that way and its logits compared with transformers' own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, SMALL, TOL, VOCAB, build, spread_weights

from explorer.core.checkpoint import FAMILIES, load_checkpoint
from explorer.core.checkpoint.in_memory import register
from explorer.core.tokenize.base import VocabTokenizer

transformers = pytest.importorskip("transformers")

GEMMA3_LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]
HYBRID_QWEN = dict(num_hidden_layers=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                   linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12)
FALCON_H1 = dict(num_hidden_layers=2, num_key_value_heads=2, mamba_d_ssm=64, mamba_n_heads=8, mamba_d_state=16,
                 mamba_n_groups=2, mamba_chunk_size=8, embedding_multiplier=1.3, lm_head_multiplier=0.7,
                 attention_in_multiplier=0.9, attention_out_multiplier=1.1, key_multiplier=0.8, ssm_in_multiplier=1.2,
                 ssm_out_multiplier=0.6, mlp_multipliers=[0.9, 1.4], ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.3])
GEMMA4 = dict(num_hidden_layers=6, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
              attention_k_eq_v=True, num_kv_shared_layers=2, sliding_window=4, vocab_size_per_layer_input=VOCAB,
              hidden_size_per_layer_input=8, use_double_wide_mlp=True, final_logit_softcapping=30.0, pad_token_id=0,
              layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2)
MOE = dict(num_experts_per_tok=2, experts_implementation="eager")
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12, q_lora_rank=24)

# model_type -> (Config class, model class, overrides of decoder_reference.SMALL)
TINY: dict[str, tuple[str, str, dict]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, n_positions=64)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=4)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(rotary_pct=0.5)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=16)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(num_key_value_heads=1, head_dim=16)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                                                         sliding_window=4, query_pre_attn_scalar=24,
                                                         attn_logit_softcapping=2.0, final_logit_softcapping=30.0)),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(num_hidden_layers=3, num_key_value_heads=2,
                                                                  head_dim=16, sliding_window=4,
                                                                  query_pre_attn_scalar=16, layer_types=GEMMA3_LAYERS)),
    "gemma3": ("Gemma3Config", "Gemma3ForConditionalGeneration", {}),  # built by gemma3() below
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(clip_qkv=0.5)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(num_key_value_heads=2, qk_layernorm=True,
                                                               use_qkv_bias=True, partial_rotary_factor=0.25)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(num_key_value_heads=2, embedding_multiplier=6.0,
                                                            attention_multiplier=0.05, residual_multiplier=0.3,
                                                            logits_scaling=4.0)),
    "bert": ("BertConfig", "BertForMaskedLM", {}),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", dict(type_vocab_size=1, pad_token_id=1)),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=96)),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(partial_rotary_factor=0.5, pad_token_id=0)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=2, sliding_window=5, pad_token_id=0)),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM", dict(num_layers=2, num_heads=4, window_size=5,
                                                          attention_types=[[["global", "local"], 1]])),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(ffn_dim=96, pad_token_id=1)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(pad_token_id=0)),
    "falcon": ("FalconConfig", "FalconForCausalLM", dict(new_decoder_architecture=True, num_kv_heads=2,
                                                         pad_token_id=0)),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(rotary_dim=8, pad_token_id=0)),
    # mixtures of experts (the full checks: test_family_moe.py)
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, **MOE)),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", dict(num_local_experts=4, **MOE)),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM", dict(num_local_experts=4, **MOE)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(num_experts=4, moe_intermediate_size=32,
                                                                shared_expert_intermediate_size=48, **MOE)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(num_experts=4, moe_intermediate_size=32, **MOE)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(num_experts=4, **MOE)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(num_local_experts=4, head_dim=16, sliding_window=4, **MOE)),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(n_routed_experts=4, moe_intermediate_size=32,
                                                                      first_k_dense_replace=1,
                                                                      **MLA, **MOE)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(n_routed_experts=4, moe_intermediate_size=32,
                                                                      first_k_dense_replace=1, n_group=2,
                                                                      topk_group=1, **MLA, **MOE)),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(n_routed_experts=4, moe_intermediate_size=32,
                                                             first_k_dense_replace=1, **MOE)),
    "llama4_text": ("Llama4TextConfig", "Llama4ForCausalLM", dict(num_local_experts=4, intermediate_size_mlp=80,
                                                                  interleave_moe_layer_step=2, **MOE)),
    # hybrids and the dense families of 2026 (the full checks: test_family_{qwen35,gemma4,lfm2,mamba,dense2026}.py)
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(num_hidden_layers=4, num_key_value_heads=2, pad_token_id=0)),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM", dict(num_hidden_layers=4, num_key_value_heads=2, sliding_window=4)),
    "exaone4": ("Exaone4Config", "Exaone4ForCausalLM", dict(num_hidden_layers=4, num_key_value_heads=2,
                                                            sliding_window=4)),
    "mistral3": ("Mistral3Config", "Mistral3ForConditionalGeneration", {}),  # built by wrapped() below
    "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", HYBRID_QWEN),
    "qwen3_5": ("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", {}),  # built by wrapped() below
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(HYBRID_QWEN, num_experts=4, moe_intermediate_size=24,
                                                                   shared_expert_intermediate_size=32, **MOE)),
    "gemma4_text": ("Gemma4TextConfig", "Gemma4ForCausalLM", GEMMA4),
    "gemma4": ("Gemma4Config", "Gemma4ForConditionalGeneration", {}),  # built by wrapped() below
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", dict(num_hidden_layers=3, num_key_value_heads=2, pad_token_id=0,
                                                   layer_types=["conv", "full_attention", "conv"])),
    "granitemoehybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                         dict(num_hidden_layers=2, num_key_value_heads=2, layer_types=["linear_attention",
                                                                                      "full_attention"],
                              mamba_n_heads=8, mamba_d_state=16, mamba_n_groups=2, mamba_chunk_size=8,
                              num_local_experts=0, shared_intermediate_size=48, position_embedding_type="rope",
                              pad_token_id=0)),
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM", FALCON_H1),
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM",
                   dict(head_dim=16, num_key_value_heads=2, layers_block_type=["linear_attention", "mlp",
                                                                               "full_attention", "mlp"],
                        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=8,
                        pad_token_id=0)),
}
WRAPPED = {"mistral3": ("mistral3_text", dict(num_key_value_heads=2, sliding_window=None)),
           "qwen3_5": ("qwen3_5_text", HYBRID_QWEN), "gemma4": ("gemma4_text", GEMMA4)}
SEEDS = {"qwen3_next": 1}  # the default draw is ill-conditioned for a DeltaNet at float32 (test_family_qwen35.py)


def wrapped(model_type: str):
    """A multimodal file (Mistral Small 3, Qwen3.5, Gemma 4) with a tiny vision tower: its language model opens."""
    _, overrides = WRAPPED[model_type]
    text = {**{k: v for k, v in SMALL.items() if k != "attn_implementation"}, **overrides}
    vision = {"mistral3": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                               image_size=32, patch_size=16, head_dim=16),
              "qwen3_5": dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                              patch_size=8, num_position_embeddings=16),
              "gemma4": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                             num_key_value_heads=2, head_dim=16, position_embedding_size=16)}[model_type]
    config_name, model_name, _ = TINY[model_type]
    extra = {"audio_config": None} if model_type == "gemma4" else {}
    config = getattr(transformers, config_name)(text_config=text, vision_config=vision, attn_implementation="eager",
                                                **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    spread_weights(model)
    return model


def gemma3():
    """A multimodal Gemma 3 (Gemma 3 4B and larger): its language model is what opens."""
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, sliding_window=4, max_position_embeddings=64,
                query_pre_attn_scalar=16, layer_types=GEMMA3_LAYERS)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3,
                                       eoi_token_index=VOCAB - 2, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    spread_weights(model)
    return model


def tiny(model_type: str):
    if model_type == "gemma3":
        return gemma3()
    if model_type in WRAPPED:
        return wrapped(model_type)
    config_name, model_name, overrides = TINY[model_type]
    model = build(config_name, model_name, **overrides)
    if model_type in SEEDS:
        spread_weights(model, SEEDS[model_type])
    return model


def test_every_family_in_the_registry_has_a_tiny_model_here():
    assert set(TINY) == set(FAMILIES) and len(FAMILIES) >= 24


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_a_transformers_model_in_memory_opens_and_matches_it(model_type):
    model = tiny(model_type)
    assert model.config.model_type == model_type
    source = register(model, VocabTokenizer([f"w{i}" for i in range(VOCAB)]))  # what explorer.show(model, tok) does
    loaded = load_checkpoint(source, device="cpu")
    assert loaded.source == "in-memory transformers model" and loaded.arch == FAMILIES[model_type].arch
    with torch.no_grad():
        reference = model(torch.tensor([IDS])).logits[0].numpy()
    assert float(np.abs(reference).max()) > 0.5  # not a comparison of near-zero numbers
    np.testing.assert_allclose(loaded.trace_ids(IDS)["logits"], reference, atol=TOL, rtol=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loaded.model.embed.weight.data.add_(1.0)  # ours is a copy: the notebook's model is untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
