"""DeepSeek-V2, DeepSeek-V3 / R1 and GLM-4.5 (``glm4_moe``) checkpoints -> our ``Transformer``.

All three: the first ``first_k_dense_replace`` layers have a dense FFN, the rest a mixture of experts with
``n_shared_experts`` shared experts (one gated FFN of their summed width) every token goes through, and the
routed experts' weights times ``routed_scaling_factor``.

* DeepSeek-V2 and V3: multi-head latent attention (core/mla.py): K and V from a ``kv_lora_rank`` latent, q
  from a ``q_lora_rank`` one (or W_Q), a separate rotary slice of ``qk_rope_head_dim`` per head (one rotary key
  for all heads), values of ``v_head_dim``; YaRN's ``mscale_all_dim`` squared scales the scores.
  V2 turns adjacent pairs (complex rotation); V3 with ``rope_interleave`` reads its rotary slice as pairs and
  writes it as halves, which is the plain rotation of the slice reordered evens-then-odds: the converter
  reorders those rows of the projections once, so the rotation is the plain one.
* DeepSeek-V2: the softmax over every expert, its top k (``group_limited_greedy``: only the experts of each
  token's ``topk_group`` best groups, a group scored by its best expert), never renormalised.
* DeepSeek-V3 and GLM-4.5: sigmoid scores; the choice adds ``e_score_correction_bias`` (the weights do not),
  groups scored by their best two; the chosen scores renormalised where ``norm_topk_prob``.
* GLM-4.5: standard grouped-query attention with q/k/v biases (``attention_bias``), rotary on half of each
  head (``partial_rotary_factor``), optional per-head q/k norms (``use_qk_norm``).

Their multi-token-prediction layers (beyond ``num_hidden_layers``) are not loaded: next-token logits do not use them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, get_bool, get_int, rope, rotary_dim
from explorer.core.checkpoint.experts import (
    MoELayout,
    drop_extra_layers,
    moe_keys,
    moe_note,
    norm_topk,
    routed_scale,
    take_moe,
)
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

LAYOUT = MoELayout(shared="shared_experts")
MLA_NAMES = {"self_attn.q_proj": "attn.W_Qm", "self_attn.q_a_proj": "attn.W_Q_a",
             "self_attn.q_a_layernorm": "attn.q_a_norm", "self_attn.q_b_proj": "attn.W_Q_b",
             "self_attn.kv_a_proj_with_mqa": "attn.W_KV_a", "self_attn.kv_a_layernorm": "attn.kv_a_norm",
             "self_attn.kv_b_proj": "attn.W_KV_b", "self_attn.o_proj": "attn.W_O", "mlp.gate_proj": "mlp.W_gate",
             "mlp.up_proj": "mlp.W_in", "mlp.down_proj": "mlp.W_out", "input_layernorm": "ln1",
             "post_attention_layernorm": "ln2"}


def _yarn_mscale(scale: float, m: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _routing(hf: dict[str, Any], family: str, base: ModelConfig) -> dict[str, Any]:
    L = base.n_layers
    first = get_int(hf, family, "first_k_dense_replace", 0)
    d_expert = get_int(hf, family, "moe_intermediate_size")
    shared = get_int(hf, family, "n_shared_experts", 0)
    groups, top_groups = hf.get("n_group") or 1, hf.get("topk_group") or 1
    switches: dict[str, Any] = dict(moe_scale=routed_scale(hf, family), d_shared=shared * d_expert)
    if family == "deepseek_v2":
        method = hf.get("topk_method") or "greedy"
        if method not in ("greedy", "group_limited_greedy"):
            raise CheckpointError(f"{family}: topk_method {method!r:.40} is not supported (greedy, group_limited_greedy)")
        router = "softmax_topk"
        if method == "group_limited_greedy":
            switches.update(moe_groups=get_int(hf, family, "n_group"), moe_topk_groups=get_int(hf, family, "topk_group"))
    else:
        router = "sigmoid_topk"
        switches.update(moe_choice_bias=True, moe_norm_topk=norm_topk(hf, family, True),
                        moe_groups=int(groups), moe_topk_groups=int(top_groups))
    return moe_keys(hf, family, L, list(range(min(first, L), L)), d_expert, router, **switches)


def deepseek_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    if isinstance(hf.get("quantization_config"), dict):  # DeepSeek-V3/R1's hub files: FP8 blocks with scales
        method = hf["quantization_config"].get("quant_method", "quantised")
        raise CheckpointError(f"{family}: this directory holds {str(method)[:20]} weights; open a dequantised "
                              "(bfloat16) copy")
    if family == "glm4_moe":
        base, notes = llama_config(hf, family)
        _, partial = rope(hf, family, ("rope_theta",), scaled_ok=True)
        attention: dict[str, Any] = dict(attn_bias=get_bool(hf, family, "attention_bias", False), attn_out_bias=False,
                                         rotary_dim=rotary_dim(base.d_head, partial, family),
                                         qk_norm="head" if hf.get("use_qk_norm") else "none")
    else:
        nope, rot = get_int(hf, family, "qk_nope_head_dim"), get_int(hf, family, "qk_rope_head_dim", low=2)
        base, notes = llama_config({**hf, "head_dim": nope + rot, "num_key_value_heads": None}, family)
        scale = (nope + rot) ** -0.5
        scaling = base.rope
        if scaling.get("rope_type") == "yarn" and scaling.get("mscale_all_dim"):
            scale *= _yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
        attention = dict(rotary_dim=rot, d_head_v=get_int(hf, family, "v_head_dim", low=1),
                         kv_lora_rank=get_int(hf, family, "kv_lora_rank", low=1),
                         q_lora_rank=get_int(hf, family, "q_lora_rank", None, low=1), attn_scale=scale,
                         attn_bias=get_bool(hf, family, "attention_bias", False),
                         rotary_interleaved=family == "deepseek_v2")
    cfg = dataclasses.replace(base, arch=family, **attention, **_routing(hf, family, base))
    notes.append(moe_note(len(cfg.moe_layers), cfg.n_layers, cfg.n_experts, cfg.experts_per_token, bool(cfg.d_shared)))
    if family != "glm4_moe":
        notes.append(f"Multi-head latent attention: keys and values come from a {cfg.kv_lora_rank}-number latent "
                     "per token; one rotary key is shared by every head.")
    return cfg, notes


def _deinterleave_rotary(out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    """DeepSeek-V3's rope_interleave: the rows of each rotary slice reordered evens first, then odds."""
    rot, dh = cfg.rotary_dim, cfg.d_head
    order = torch.cat([torch.arange(0, rot, 2), torch.arange(1, rot, 2)])
    for i in range(cfg.n_layers):
        q_key = f"blocks.{i}.attn.W_Q_b.weight" if cfg.q_lora_rank else f"blocks.{i}.attn.W_Qm.weight"
        q = out[q_key].unflatten(0, (cfg.n_heads, dh))                  # [H, dh, in]
        out[q_key] = torch.cat([q[:, : dh - rot], q[:, dh - rot:][:, order]], dim=1).flatten(0, 1)
        kv = out[f"blocks.{i}.attn.W_KV_a.weight"]                         # [rank + rot, d]
        out[f"blocks.{i}.attn.W_KV_a.weight"] = torch.cat([kv[: cfg.kv_lora_rank], kv[cfg.kv_lora_rank:][order]])
        bias = out.get(f"blocks.{i}.attn.W_KV_a.bias")
        if bias is not None:
            out[f"blocks.{i}.attn.W_KV_a.bias"] = torch.cat([bias[: cfg.kv_lora_rank], bias[cfg.kv_lora_rank:][order]])


def convert_deepseek(weights: dict[str, torch.Tensor], cfg: ModelConfig, hf: dict[str, Any],
                     family: str) -> dict[str, torch.Tensor]:
    def rest(t: Tensors, out: dict[str, torch.Tensor]) -> None:
        if family == "deepseek_v3" and hf.get("rope_interleave", True):
            _deinterleave_rotary(out, cfg)
        take_moe(t, out, cfg, LAYOUT)

    names = LLAMA_NAMES if family == "glm4_moe" else MLA_NAMES
    return convert_llama(drop_extra_layers(weights, cfg.n_layers), cfg, family, names, rest)


FAMILIES = tuple(Family(family, family, lambda hf, f=family: deepseek_config(hf, f),
                        lambda w, c, hf, f=family: convert_deepseek(w, c, hf, f))
                 for family in ("deepseek_v2", "deepseek_v3", "glm4_moe"))
