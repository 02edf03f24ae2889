"""Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B), Qwen3-MoE (30B-A3B, 235B-A22B) and OLMoE -> our ``Transformer``.

Qwen's and OLMo's attention (qwen.py, olmo.py) with a mixture of experts in ``mlp``: the router's softmax over
every expert, its top ``num_experts_per_tok`` (renormalised where ``norm_topk_prob``), each expert a gated FFN of
width ``moe_intermediate_size`` (OLMoE: ``intermediate_size``):

* Qwen2-MoE: q/k/v biases (``qkv_bias``) without an output bias; a shared expert of width
  ``shared_expert_intermediate_size`` every token goes through, times sigmoid(x . w) (``shared_expert_gate``);
* Qwen2-MoE and Qwen3-MoE: the layers in ``mlp_only_layers``, and those not on the ``decoder_sparse_step``,
  keep a dense FFN of width ``intermediate_size``;
* Qwen3-MoE: each head's q and k RMS-normed; no shared expert;
* OLMoE: all heads' q (and k) RMS-normed as one vector, then clamped to ``clip_qkv`` where set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.core.checkpoint.convert import get_bool, get_int, number, sliding_layers, window
from explorer.core.checkpoint.experts import MoELayout, moe_keys, moe_note, norm_topk, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

QWEN_MOE = MoELayout(shared="shared_expert", shared_gate="shared_expert_gate")


def _sparse_layers(hf: dict[str, Any], family: str, n_layers: int) -> list[int]:
    """Qwen's rule: a layer is a mixture of experts unless in mlp_only_layers or off the decoder_sparse_step."""
    dense = hf.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise CheckpointError(f"{family} config.json: mlp_only_layers should list layer numbers (got {dense!r:.60})")
    step = get_int(hf, family, "decoder_sparse_step", 1, low=1)
    return [i for i in range(n_layers) if i not in dense and (i + 1) % step == 0]


def qwen_moe_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config(hf, family)
    L = base.n_layers
    if family == "olmoe":
        moe = moe_keys(hf, family, L, list(range(L)), base.d_ff, "softmax_topk",
                       moe_norm_topk=norm_topk(hf, family, False))
        cfg = dataclasses.replace(base, arch=family, qk_norm="full", qkv_clip=number(hf, family, "clip_qkv"),
                                  attn_bias=get_bool(hf, family, "attention_bias", False), **moe)
        notes.append(moe_note(L, L, cfg.n_experts, cfg.experts_per_token, False))
        return cfg, notes
    d_expert = get_int(hf, family, "moe_intermediate_size")
    moe = moe_keys(hf, family, L, _sparse_layers(hf, family, L), d_expert, "softmax_topk",
                   moe_norm_topk=norm_topk(hf, family, False))
    if family == "qwen2_moe":
        slide = window(hf, family) if hf.get("use_sliding_window", False) else None
        layers = sliding_layers(hf, family, L, lambda i: False) if slide else ()
        shared = get_int(hf, family, "shared_expert_intermediate_size", 0)
        switches: dict[str, Any] = dict(attn_bias=get_bool(hf, family, "qkv_bias", True), attn_out_bias=False,
                                        sliding_window=slide if layers else None, sliding_layers=layers,
                                        d_shared=shared, moe_shared_gate=bool(shared))
    else:
        switches = dict(attn_bias=get_bool(hf, family, "attention_bias", False), qk_norm="head")
    cfg = dataclasses.replace(base, arch=family, **switches, **moe)
    notes.append(moe_note(len(cfg.moe_layers), L, cfg.n_experts, cfg.experts_per_token, bool(cfg.d_shared)))
    return cfg, notes


def convert_qwen_moe(weights: dict, cfg: ModelConfig, family: str) -> dict:
    return convert_llama(weights, cfg, family, LLAMA_NAMES, lambda t, out: take_moe(t, out, cfg, QWEN_MOE))


FAMILIES = tuple(Family(family, family, lambda hf, f=family: qwen_moe_config(hf, f),
                        lambda w, c, hf, f=family: convert_qwen_moe(w, c, f))
                 for family in ("qwen2_moe", "qwen3_moe", "olmoe"))
