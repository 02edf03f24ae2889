"""The hybrid sections of _sections.py: a Qwen3.5-0.8B-shaped and a Gemma-4-E2B-shaped random model at 1024 tokens.

Built with ``transformers`` from a config (random weights, nothing read or downloaded); ours through the family's
own converter (``FAMILIES[model_type]``) on the very same tensors. The shapes follow the public configs as far as
they are known here (not read from the hub: no downloads); change a number in ``SHAPES`` to match a release:

* qwen3.5-0.8b: 24 layers (18 Gated DeltaNet, 6 attention), d_model 1024, attention 8 / 2 K/V heads of 256 with
  rotary on a quarter and the output gate, DeltaNet 16 q/k heads and 16 v heads of 128, SwiGLU 3584, vocabulary
  248,320, tied;
* gemma-4-e2b: 35 layers (sliding window 512 on five of every six, the last global), d_model 1536, 8 heads of 256
  (global: 512) over 1 K/V head, the last 20 layers reading earlier layers' K/V (their FFN 2 x 6144 wide), per-layer
  embeddings of 256, final soft cap 30, vocabulary 262,144 - but the per-layer embedding TABLE cut to 32,768 rows
  (the real one is 262,144 x 35 x 256: 9 GB in float32; a lookup costs the same) and prompts drawn from those ids.

``--max-layers`` keeps the layer pattern's first layers, the last one attending (global), and no KV sharing.
"""

from __future__ import annotations

SHAPES = {
    "qwen3.5-0.8b": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25})),
    "gemma-4-e2b": ("Gemma4TextConfig", "Gemma4ForCausalLM", dict(
        vocab_size=262144, hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8,
        num_key_value_heads=1, head_dim=256, global_head_dim=512, sliding_window=512, num_kv_shared_layers=20,
        hidden_size_per_layer_input=256, vocab_size_per_layer_input=32768, use_double_wide_mlp=True,
        final_logit_softcapping=30.0)),
}
ID_LIMITS = {"gemma-4-e2b": 32768}  # prompts drawn below the per-layer table's rows


def hybrid_config(tf, shape: str, layers: int, context: int):
    """transformers' config of ``shape`` cut to ``layers`` layers (a reduced run)."""
    config_name, _, kw = SHAPES[shape]
    kw = dict(kw, num_hidden_layers=layers, max_position_embeddings=context)
    if shape == "qwen3.5-0.8b":  # every fourth layer attends; a reduced run keeps its last layer attending
        types = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
        types[-1] = "full_attention"
        kw.update(layer_types=types)
    if shape == "gemma-4-e2b":
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        types[-1] = "full_attention"
        shared = kw["num_kv_shared_layers"] if layers == 35 else 0
        kw.update(layer_types=types, num_kv_shared_layers=shared)
    return getattr(tf, config_name)(**kw)


def build_hybrid(tf, shape: str, layers: int, context: int):
    """(transformers' model, our ModelConfig, our weights on its tensors)."""
    from explorer.core.checkpoint import FAMILIES
    from explorer.core.checkpoint.loader import configure

    config = hybrid_config(tf, shape, layers, context)
    hf = getattr(tf, SHAPES[shape][1])(config).eval()
    family = FAMILIES[config.model_type]
    text, cfg, _ = configure(family, hf.config.to_dict())
    return hf, cfg, family.convert(dict(hf.state_dict()), cfg, text)
