"""gpt-oss (20b, 120b) checkpoints -> our ``Transformer``.

Llama's layout with:

* attention sinks: each head has a learned logit (``self_attn.sinks``) that joins every row of its scores in
  the softmax and is then dropped, so a row of the pattern sums to 1 less the sink's weight (``attn.sink``);
* every other layer attends within a sliding window (``layer_types``; ``sliding_window`` 128), the others to
  every earlier token; YaRN RoPE scaling (factor 32);
* biases on q, k, v and the output projection;
* a mixture of experts on every layer: the router (with a bias) takes each token's top ``num_experts_per_tok``
  logits and a softmax over those; each expert is the clamped SwiGLU (up + 1) * g * sigmoid(1.702 g), g and up
  clamped to ``swiglu_limit``, with biases; its weights stored transposed, gate and up interleaved.

The files hold the experts in MXFP4 on the hub (transformers dequantises them); a directory with dequantised
(bfloat16 / float32) experts opens here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, expected_shapes, get_float, sliding_layers, window
from explorer.core.checkpoint.experts import MoELayout, moe_keys, moe_note, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

GPT_OSS = MoELayout(blocks=("mlp",), routers=("router",), per_expert=None, fused="interleaved_t")


def gpt_oss_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "gpt_oss"
    if isinstance(hf.get("quantization_config"), dict):
        raise CheckpointError("gpt_oss: this directory holds MXFP4-quantised experts; open a dequantised copy "
                              "(transformers' save_pretrained of the model loaded in bfloat16)")
    base, notes = llama_config(hf, family)
    L = base.n_layers
    slide = window(hf, family)
    layers = sliding_layers(hf, family, L, lambda i: bool((i + 1) % 2)) if slide else ()
    moe = moe_keys(hf, family, L, list(range(L)), base.d_ff, "topk_softmax", moe_router_bias=True,
                   moe_expert_bias=True, moe_glu_limit=get_float(hf, family, "swiglu_limit", 7.0),
                   moe_glu_alpha=get_float(hf, family, "swiglu_alpha", 1.702))
    cfg = dataclasses.replace(base, arch=family, attn_bias=bool(hf.get("attention_bias", True)), attn_sinks=True,
                              sliding_window=slide if layers else None, sliding_layers=layers, **moe)
    if layers:
        notes.append(f"{len(layers)} of {L} layers attend within a sliding window of {slide} tokens.")
    notes.append("Attention sinks: each head's pattern leaves a share of every row to its learned sink "
                 "(shown as the sink's weight), so a row sums to 1 with it.")
    notes.append(moe_note(L, L, cfg.n_experts, cfg.experts_per_token, False))
    return cfg, notes


def convert_gpt_oss(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    def rest(t: Tensors, out: dict[str, torch.Tensor]) -> None:
        shapes = expected_shapes(cfg)
        for i in range(cfg.n_layers):
            out[f"blocks.{i}.attn.sinks"] = t.take(f"model.layers.{i}.self_attn.sinks", shapes[f"blocks.{i}.attn.sinks"])
        take_moe(t, out, cfg, GPT_OSS)

    return convert_llama(weights, cfg, "gpt_oss", LLAMA_NAMES, rest)


FAMILIES = (Family("gpt_oss", "gpt_oss", gpt_oss_config, lambda w, c, hf: convert_gpt_oss(w, c)),)
