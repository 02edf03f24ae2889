"""Hugging Face StableLM (StableLM 2, StableLM-3B-4E1T, Zephyr) checkpoints -> our ``Transformer``.

Llama's names and SwiGLU FFN with:

* LayerNorm with biases (``layer_norm_eps``) instead of RMSNorm;
* rotary positions on the first ``partial_rotary_factor`` of each head's dimensions;
* biases on q, k, v (``use_qkv_bias``) but never on the output projection;
* optionally (``qk_layernorm``) a LayerNorm without bias of each head's q and k, with its own
  weight per head (``norms.{h}`` in the file; ``qk_norm="per_head"`` here);
* optionally (``use_parallel_residual``) a parallel block: attention and FFN both read the one
  ``input_layernorm(x)``. Our parallel block normalises x for each sublayer (``ln1``, ``ln2``);
  both are given the input norm's weights, so both compute the same numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import get_bool, get_float, rope
from explorer.core.checkpoint.llama import (
    LLAMA_NAMES,
    convert_llama,
    llama_config,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "stablelm"


def stablelm_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config({**hf, "rope_parameters": None, "rope_scaling": None}, FAMILY)
    theta, partial = rope(hf, FAMILY, ("rope_theta",))
    rotary_dim = int(base.d_head * (0.25 if partial is None else partial))
    if rotary_dim % 2 or not 0 < rotary_dim <= base.d_head:
        raise CheckpointError(f"{FAMILY}: the rotary part of each head ({rotary_dim} of {base.d_head} dimensions) "
                              "must be even and fit the head")
    qkv_bias = get_bool(hf, FAMILY, "use_qkv_bias", False)
    cfg = dataclasses.replace(
        base, arch=FAMILY, norm="layernorm", norm_eps=get_float(hf, FAMILY, "layer_norm_eps", 1e-5), rotary_base=theta,
        rotary_dim=rotary_dim if rotary_dim < base.d_head else None, attn_bias=qkv_bias,
        attn_out_bias=False if qkv_bias else None, qk_norm="per_head" if hf.get("qk_layernorm") else "none",
        parallel_residual=get_bool(hf, FAMILY, "use_parallel_residual", False))
    return cfg, notes


def convert_stablelm(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    weights = dict(weights)
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        for which, heads in (("q", cfg.n_heads), ("k", cfg.kv_heads)):
            per_head = [weights.pop(f"{p}self_attn.{which}_layernorm.norms.{h}.weight", None) for h in range(heads)]
            if cfg.qk_norm == "per_head" and all(w is not None for w in per_head):  # -> [heads, 1, d_head]
                weights[f"{p}self_attn.{which}_layernorm.weight"] = torch.stack(per_head)[:, None, :]
        if cfg.parallel_residual:  # the one input norm feeds both sublayers
            for kind in ("weight", "bias"):
                weights[f"{p}post_attention_layernorm.{kind}"] = weights[f"{p}input_layernorm.{kind}"]
    names = {**{k: v for k, v in LLAMA_NAMES.items() if not k.endswith(("q_norm", "k_norm"))},
             "self_attn.q_layernorm": "attn.q_norm", "self_attn.k_layernorm": "attn.k_norm"}
    return convert_llama(weights, cfg, FAMILY, names)


FAMILIES = (Family("stablelm", FAMILY, stablelm_config, layout_only(convert_stablelm)),)
