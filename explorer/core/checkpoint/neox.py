"""Hugging Face GPT-NeoX (Pythia) checkpoints -> our ``Transformer``.

Pre-norm LayerNorm with biases, rotary on the first ``rotary_pct`` / ``partial_rotary_factor`` of
each head's dimensions, a fused ``query_key_value`` whose rows are, per head, that head's q, k and
v (``[H, 3, d_head]``), a plain GELU FFN, and the parallel residual
``x + attn(ln1(x)) + mlp(ln2(x))`` unless ``use_parallel_residual`` is false.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_bool,
    get_float,
    get_int,
    rope,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError


def neox_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "gpt-neox"
    d, n_heads = get_int(hf, family, "hidden_size"), get_int(hf, family, "num_attention_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{family}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    d_head = d // n_heads
    theta, partial = rope(hf, family, ("rotary_emb_base", "rope_theta"))
    rotary_dim = int(d_head * (0.25 if partial is None else partial))  # transformers' default fraction
    if rotary_dim % 2 or rotary_dim > d_head or rotary_dim < 0:
        raise CheckpointError(f"{family}: the rotary part of each head ({rotary_dim} of {d_head} dimensions) "
                              "must be even and fit the head")
    cfg = ModelConfig(
        arch=family, vocab_size=get_int(hf, family, "vocab_size"), n_ctx=get_int(hf, family, "max_position_embeddings", 2048),
        d_model=d, n_layers=get_int(hf, family, "num_hidden_layers"), n_heads=n_heads, d_head=d_head,
        d_ff=get_int(hf, family, "intermediate_size"), norm="layernorm", norm_placement="pre",
        norm_eps=get_float(hf, family, "layer_norm_eps", 1e-5), positions="rotary" if rotary_dim else "none",
        rotary_dim=rotary_dim or None, rotary_base=theta, activation=activation(hf, family, "gelu"),
        gated_ffn=False, parallel_residual=get_bool(hf, family, "use_parallel_residual", True),
        attn_bias=get_bool(hf, family, "attention_bias", True), mlp_bias=True,
        tie_embeddings=get_bool(hf, family, "tie_word_embeddings", False))
    return cfg, []


def convert_neox(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """GPT-NeoX names -> ours; ``query_key_value`` rows [H, 3, d_head] are split into W_Q, W_K, W_V."""
    shapes, t = expected_shapes(cfg), Tensors(weights, "gpt-neox")
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    out = {"embed.weight": t.take("gpt_neox.embed_in.weight", shapes["embed.weight"])}
    for i in range(cfg.n_layers):
        p, q = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        for theirs, ours in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            for kind in ("weight", "bias"):
                out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
        w = t.take(p + "attention.query_key_value.weight", (3 * H * dh, d)).reshape(H, 3, dh, d)
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"attn.{name}.weight"] = w[:, j].reshape(H * dh, d)
        if cfg.attn_bias:
            b = t.take(p + "attention.query_key_value.bias", (3 * H * dh,)).reshape(H, 3, dh)
            for j, name in enumerate(("W_Q", "W_K", "W_V")):
                out[q + f"attn.{name}.bias"] = b[:, j].reshape(H * dh)
        for theirs, ours in (("attention.dense", "attn.W_O"), ("mlp.dense_h_to_4h", "mlp.W_in"),
                             ("mlp.dense_4h_to_h", "mlp.W_out")):
            for kind in ("weight", "bias"):
                if q + f"{ours}.{kind}" in shapes:
                    out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"gpt_neox.final_layer_norm.{kind}", shapes[f"ln_final.{kind}"])
    head = "embed_out.weight" if "embed_out.weight" in t.sd else "lm_head.weight"  # older / newer name
    out["unembed.weight"] = t.unembedding(out, cfg, shapes, head)
    t.finish()
    return out


FAMILIES = (Family("gpt_neox", "gpt-neox", neox_config, layout_only(convert_neox)),)
