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
from decoder_reference import IDS, TOL, VOCAB, build, spread_weights

from explorer.core.checkpoint import FAMILIES, load_checkpoint
from explorer.core.checkpoint.in_memory import register
from explorer.core.tokenize.base import VocabTokenizer

transformers = pytest.importorskip("transformers")

GEMMA3_LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]
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
}


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
    config_name, model_name, overrides = TINY[model_type]
    return build(config_name, model_name, **overrides)


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
