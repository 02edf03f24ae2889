"""Every family's `export` round-trips: trace.npz and the TransformerLens-named trace.safetensors are
written for a tiny random model of each family (as the family tests build them) and read back equal.
Qwen3 and Gemma 3 used to fail here: their per-head q/k norms' hook_scale is [1, pos, head, 1]."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from decoder_reference import IDS, build  # noqa: E402
from test_bert import build as build_encoder  # noqa: E402

from explorer.cli import main  # noqa: E402
from explorer.core.interop import read_trace_safetensors  # noqa: E402

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"num_key_value_heads": 2}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"num_key_value_heads": 2, "sliding_window": 4}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"rotary_pct": 0.5}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 2}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 1, "head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4,
                                                     "query_pre_attn_scalar": 16, "attn_logit_softcapping": 2.0}),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16,
                                                              "sliding_window": 4, "query_pre_attn_scalar": 16}),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", {}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"num_key_value_heads": 2}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"qk_layernorm": True, "use_qkv_bias": True}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"residual_multiplier": 0.5}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"partial_rotary_factor": 0.5, "pad_token_id": 0}),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM", {"num_layers": 2, "num_heads": 4,
                                                      "attention_types": [[["global", "local"], 1]],
                                                      "window_size": 4, "pad_token_id": 0}),
    "opt": ("OPTConfig", "OPTForCausalLM", {"ffn_dim": 96, "pad_token_id": 1}),
    "bloom": ("BloomConfig", "BloomForCausalLM", {"n_head": 4, "pad_token_id": 0}),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"new_decoder_architecture": True, "num_kv_heads": 2,
                                                     "pad_token_id": 0}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"rotary_dim": 8, "pad_token_id": 0}),
}


def round_trip(path, out, ids) -> None:
    from explorer.core.checkpoint import load_checkpoint

    loaded = load_checkpoint(path, device="cpu")
    prompt = loaded.tokenizer.decode(ids) if hasattr(loaded.tokenizer, "decode") else None
    assert main(["export", "-c", str(path), "--device", "cpu", "-p", prompt or "hello", "-o", str(out)]) == 0
    back = read_trace_safetensors(out / "trace.safetensors")
    with np.load(out / "trace.npz") as npz:
        tokens = npz["token_ids"]
        np.testing.assert_array_equal(back.token_ids, tokens)
        trace = loaded.trace_ids([int(i) for i in tokens])
        np.testing.assert_allclose(npz["logits"], trace["logits"], atol=1e-5)
    for key in back.stored_keys():
        np.testing.assert_allclose(back[key], trace[key], atol=1e-5, err_msg=key)
    if loaded.config.qk_norm in ("head", "per_head"):
        assert any(k.startswith("blocks.0.attn.q_norm.") for k in back.stored_keys())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_familys_export_round_trips(tmp_path, family):
    config_name, model_name, overrides = FAMILIES[family]
    build(config_name, model_name, **overrides).save_pretrained(tmp_path / "model")
    round_trip(tmp_path / "model", tmp_path / "export", IDS)


def test_gpt2_and_encoder_exports_round_trip(tiny_gpt2_dir, tmp_path):
    round_trip(tiny_gpt2_dir, tmp_path / "gpt2", IDS)
    build_encoder("bert-mlm").save_pretrained(tmp_path / "bert")
    round_trip(tmp_path / "bert", tmp_path / "bert-export", [2, 17, 99, 3])
