"""Hugging Face Phi-1 / Phi-1.5 / Phi-2 checkpoints (``model_type`` ``phi``) -> our ``Transformer``.

A parallel block that shares one LayerNorm: ``x + attn(ln(x)) + mlp(ln(x))`` (``shared_norm``),
rotary positions on the first ``partial_rotary_factor`` of each head (Phi-2: 32 of 80 dimensions),
biases on every projection (``dense`` is the output projection), a plain ``gelu_new`` FFN
(``fc1``/``fc2``), a final LayerNorm and an un-embedding (``lm_head``) with its own bias.
``qk_layernorm`` (no released checkpoint sets it) is refused.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_int,
    rope,
    rotary_dim,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "phi"


def phi_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d, n_heads = get_int(hf, FAMILY, "hidden_size"), get_int(hf, FAMILY, "num_attention_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    if hf.get("qk_layernorm"):
        raise CheckpointError("this Phi checkpoint normalises queries and keys (qk_layernorm), which is not supported")
    n_kv = get_int(hf, FAMILY, "num_key_value_heads") if hf.get("num_key_value_heads") is not None else n_heads
    d_head = d // n_heads
    theta, partial = rope(hf, FAMILY, ("rope_theta",))
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=get_int(hf, FAMILY, "max_position_embeddings", 2048),
        d_model=d, n_layers=get_int(hf, FAMILY, "num_hidden_layers"), n_heads=n_heads, d_head=d_head,
        d_ff=get_int(hf, FAMILY, "intermediate_size"), n_kv_heads=n_kv if n_kv != n_heads else None,
        norm="layernorm", norm_placement="pre", norm_eps=float(hf.get("layer_norm_eps", 1e-5)),
        positions="rotary", rotary_dim=rotary_dim(d_head, 0.5 if partial is None else partial, FAMILY),
        rotary_base=theta, activation=activation(hf, FAMILY, "gelu_new"), gated_ffn=False,
        parallel_residual=True, shared_norm=True, attn_bias=True, mlp_bias=True, unembed_bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
    return cfg, []


def convert_phi(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Phi names -> ours (nn.Linear layouts agree)."""
    shapes, t = expected_shapes(cfg), Tensors(weights, FAMILY)
    out = {"embed.weight": t.take("model.embed_tokens.weight", shapes["embed.weight"])}
    names = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
             "self_attn.dense": "attn.W_O", "mlp.fc1": "mlp.W_in", "mlp.fc2": "mlp.W_out", "input_layernorm": "ln1"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                out[key] = t.take(f"model.layers.{i}.{theirs}.{kind}", shapes[key])
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"model.final_layernorm.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    out["unembed.bias"] = t.take("lm_head.bias", shapes["unembed.bias"])
    t.finish()
    return out


FAMILIES = (Family("phi", FAMILY, phi_config, layout_only(convert_phi)),)
