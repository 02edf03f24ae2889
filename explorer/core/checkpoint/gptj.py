"""Hugging Face GPT-J checkpoints (``model_type`` ``gptj``) -> our ``Transformer``.

A parallel block sharing one LayerNorm, ``x + attn(ln_1(x)) + mlp(ln_1(x))`` (``shared_norm``);
rotary positions on the first ``rotary_dim`` dimensions of each head (GPT-J-6B: 64 of 256) in
GPT-J's **interleaved** layout: it turns adjacent pairs (x0, x1), (x2, x3), ... where Llama/NeoX
turn (x_i, x_{i+r/2}) (``rotary_interleaved``; same angles, base 10000). No biases in attention,
biases in the ``gelu_new`` FFN (``fc_in``/``fc_out``), and an untied un-embedding with a bias.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_int,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "gptj"


def gptj_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d, n_heads = get_int(hf, FAMILY, "n_embd"), get_int(hf, FAMILY, "n_head")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: n_embd ({d}) is not a multiple of n_head ({n_heads})")
    d_head = d // n_heads
    rotary = get_int(hf, FAMILY, "rotary_dim") if hf.get("rotary_dim") is not None else d_head
    if rotary <= 0 or rotary % 2 or rotary > d_head:
        raise CheckpointError(f"{FAMILY}: rotary_dim ({rotary}) must be even, positive and at most the head "
                              f"size ({d_head})")
    act = activation({"hidden_act": hf.get("activation_function", "gelu_new")}, FAMILY, "gelu_new")
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=get_int(hf, FAMILY, "n_positions", 2048),
        d_model=d, n_layers=get_int(hf, FAMILY, "n_layer"), n_heads=n_heads, d_head=d_head,
        d_ff=get_int(hf, FAMILY, "n_inner") if hf.get("n_inner") is not None else 4 * d,
        norm="layernorm", norm_placement="pre", norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        positions="rotary", rotary_dim=rotary if rotary != d_head else None, rotary_base=10000.0,
        rotary_interleaved=True, activation=act, parallel_residual=True, shared_norm=True,
        attn_bias=False, mlp_bias=True, unembed_bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
    return cfg, []


def convert_gptj(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """GPT-J names -> ours (nn.Linear layouts agree); older saves' causal-mask buffers are dropped."""
    shapes = expected_shapes(cfg)
    t = Tensors({k: v for k, v in weights.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}, FAMILY)
    out = {"embed.weight": t.take("transformer.wte.weight", shapes["embed.weight"])}
    names = {"ln_1.weight": "ln1.weight", "ln_1.bias": "ln1.bias", "attn.q_proj.weight": "attn.W_Q.weight",
             "attn.k_proj.weight": "attn.W_K.weight", "attn.v_proj.weight": "attn.W_V.weight",
             "attn.out_proj.weight": "attn.W_O.weight", "mlp.fc_in.weight": "mlp.W_in.weight",
             "mlp.fc_in.bias": "mlp.W_in.bias", "mlp.fc_out.weight": "mlp.W_out.weight",
             "mlp.fc_out.bias": "mlp.W_out.bias"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            out[f"blocks.{i}.{ours}"] = t.take(f"transformer.h.{i}.{theirs}", shapes[f"blocks.{i}.{ours}"])
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"transformer.ln_f.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    out["unembed.bias"] = t.take("lm_head.bias", shapes["unembed.bias"])
    t.finish()
    return out


FAMILIES = (Family("gptj", FAMILY, gptj_config, layout_only(convert_gptj)),)
