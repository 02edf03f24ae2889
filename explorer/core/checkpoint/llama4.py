"""Llama 4 (Scout, Maverick) language models (``llama4_text``) -> our ``Transformer``.

Llama's layout, layer by layer as the per-layer plan says (core/plan.py):

* rotary positions turn adjacent pairs (a complex rotation), except on the NoPE layers (``no_rope_layers[i]``
  is 0: every fourth layer), which have no positions at all; there each query is scaled by
  1 + ``attn_scale`` x log(1 + floor((position + 1) / ``floor_scale``)) (``attn_temperature_tuning``);
* the rotary layers attend within chunks of ``attention_chunk_size`` tokens (``layer_types``), the NoPE layers
  to every earlier token; the rotary layers' q and k are RMS-normed without a weight (``use_qk_norm``);
* the layers in ``moe_layers`` are a mixture of experts: the router takes each token's top
  ``num_experts_per_tok`` logits, sigmoid of each scales the token's input to that expert, and a shared expert
  every token goes through is added; the others a dense FFN of ``intermediate_size_mlp``.

(The multimodal ``llama4`` wrapper is not opened yet: only ``llama4_text`` checkpoints.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import get_bool, get_float, get_int
from explorer.core.checkpoint.experts import MoELayout, moe_keys, moe_note, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

LAYOUT = MoELayout(blocks=("feed_forward",), routers=("router",), per_expert=None, fused="concat_t",
                   shared="shared_expert")
NAMES = {**{k: v for k, v in LLAMA_NAMES.items() if not k.startswith("mlp.")},
         "feed_forward.gate_proj": "mlp.W_gate", "feed_forward.up_proj": "mlp.W_in",
         "feed_forward.down_proj": "mlp.W_out"}


def _layer_list(hf: dict[str, Any], key: str, n_layers: int) -> list:
    value = hf.get(key)
    if not isinstance(value, list) or len(value) != n_layers:
        raise CheckpointError(f"llama4_text config.json: {key} should list {n_layers} layers (got {value!r:.60})")
    return value


def llama4_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "llama4_text"
    base, notes = llama_config({**hf, "intermediate_size": get_int(hf, family, "intermediate_size_mlp")}, family)
    L = base.n_layers
    uses_rope = _layer_list(hf, "no_rope_layers", L)
    nope = [i for i, flag in enumerate(uses_rope) if not flag]
    types = _layer_list(hf, "layer_types", L)
    chunked = [i for i, kind in enumerate(types) if kind == "chunked_attention"]
    moe_layers = hf.get("moe_layers")
    if not isinstance(moe_layers, list) or not all(isinstance(i, int) and 0 <= i < L for i in moe_layers):
        raise CheckpointError(f"llama4_text config.json: moe_layers should list layer numbers (got {moe_layers!r:.60})")
    width = get_int(hf, family, "intermediate_size")
    moe = moe_keys(hf, family, L, moe_layers, width, "topk_sigmoid", d_shared=width, moe_input_weight=True)
    switches: dict[str, Any] = dict(
        rotary_interleaved=True, nope_layers=tuple(nope), attn_bias=get_bool(hf, family, "attention_bias", False),
        chunked_layers=tuple(chunked), attention_chunk=get_int(hf, family, "attention_chunk_size") if chunked else None)
    if hf.get("use_qk_norm", True):
        switches.update(qk_norm="head_unscaled", qk_norm_layers=tuple(i for i in range(L) if i not in nope))
    if hf.get("attn_temperature_tuning", True) and nope:
        switches.update(attn_temperature=get_float(hf, family, "attn_scale", 0.1),
                        attn_temperature_floor=get_float(hf, family, "floor_scale", 8192.0))
    cfg = dataclasses.replace(base, arch="llama4", **switches, **moe)
    notes.append(moe_note(len(cfg.moe_layers), L, cfg.n_experts, cfg.experts_per_token, True))
    if nope:
        notes.append(f"{len(nope)} of {L} layers have no rotary positions (NoPE); "
                     + (f"the others attend within chunks of {cfg.attention_chunk} tokens." if chunked else ""))
    return cfg, notes


def convert_llama4(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return convert_llama(weights, cfg, "llama4", NAMES, lambda t, out: take_moe(t, out, cfg, LAYOUT))


FAMILIES = (Family("llama4_text", "llama4", llama4_config, lambda w, c, hf: convert_llama4(w, c)),)
