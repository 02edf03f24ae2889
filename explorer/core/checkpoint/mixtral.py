"""Mixtral, PhiMoE and GraniteMoE checkpoints -> our ``Transformer`` with a mixture of experts on every layer.

All three keep Llama's attention and put ``block_sparse_moe`` (a router and the experts) where the FFN was:

* Mixtral: the router's softmax over every expert, its top ``num_experts_per_tok`` renormalised to sum to 1;
  experts ``w1`` (gate), ``w3`` (up), ``w2`` (down); Mistral's optional sliding window on every layer;
* PhiMoE (Phi-3.5-MoE, Phi-mini-MoE): LayerNorms with biases (epsilon ``rms_norm_eps``), projection biases
  where ``attention_bias``, an un-embedding bias where ``lm_head_bias``, and the "sparsemixer" router: at
  inference its two experts are the best and the second best, each weighted by its probability in a softmax
  over the experts within 2 x ``router_jitter_noise`` (relative) of it, the second's without the first;
* GraniteMoE: Granite's four multipliers (granite.py), top-k of the logits then a softmax over those k, experts
  stored fused (``input_linear`` [E, 2f, d], ``output_linear``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.core.checkpoint.convert import Tensors, expected_shapes, get_bool, get_float
from explorer.core.checkpoint.experts import MoELayout, moe_keys, moe_note, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.granite import granite_config
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

SPARSE = MoELayout(blocks=("block_sparse_moe", "mlp"), routers=("gate", "router"), per_expert=("w1", "w3", "w2"))
GRANITE = MoELayout(blocks=("block_sparse_moe",), routers=("router.layer", "router"), per_expert=None)


def mixtral_config(hf: dict[str, Any], family: str = "mixtral") -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config(hf, family)
    L = base.n_layers
    router = {"mixtral": "softmax_topk", "phimoe": "sparsemixer", "granitemoe": "topk_softmax"}[family]
    switches: dict[str, Any] = moe_keys(hf, family, L, list(range(L)), base.d_ff, router,
                                        moe_norm_topk=family == "mixtral")
    if family == "phimoe":
        switches.update(norm="layernorm", attn_bias=get_bool(hf, family, "attention_bias", False),
                        unembed_bias=get_bool(hf, family, "lm_head_bias", False),
                        moe_jitter=get_float(hf, family, "router_jitter_noise", 0.01))
    cfg = dataclasses.replace(base, arch=family, **switches)
    if family == "phimoe" and cfg.rope.get("rope_type") not in (None, "longrope"):
        raise CheckpointError(f"phimoe: RoPE scaling {cfg.rope.get('rope_type')!r} is not one PhiMoE uses")
    if family == "phimoe" and cfg.rope and not {"short_mscale", "long_mscale"} <= set(cfg.rope):
        raise CheckpointError("phimoe: LongRoPE scaling needs short_mscale and long_mscale")
    notes.append(moe_note(L, L, cfg.n_experts, cfg.experts_per_token, False))
    return cfg, notes


def granitemoe_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    base, notes = granite_config(hf, "granitemoe")
    L = base.n_layers
    moe = moe_keys(hf, "granitemoe", L, list(range(L)), base.d_ff, "topk_softmax")
    cfg = dataclasses.replace(base, **moe)
    notes.append(moe_note(L, L, cfg.n_experts, cfg.experts_per_token, False))
    return cfg, notes


def convert_sparse(weights: dict, cfg: ModelConfig, family: str, layout: MoELayout) -> dict:
    def rest(t: Tensors, out: dict) -> None:
        take_moe(t, out, cfg, layout)
        if cfg.unembed_bias:  # PhiMoE's lm_head_bias
            out["unembed.bias"] = t.take("lm_head.bias", expected_shapes(cfg)["unembed.bias"])

    return convert_llama(weights, cfg, family, LLAMA_NAMES, rest)


FAMILIES = (
    Family("mixtral", "mixtral", mixtral_config, lambda w, c, hf: convert_sparse(w, c, "mixtral", SPARSE)),
    Family("phimoe", "phimoe", lambda hf: mixtral_config(hf, "phimoe"),
           lambda w, c, hf: convert_sparse(w, c, "phimoe", SPARSE)),
    Family("granitemoe", "granitemoe", granitemoe_config,
           lambda w, c, hf: convert_sparse(w, c, "granitemoe", GRANITE)),
)
