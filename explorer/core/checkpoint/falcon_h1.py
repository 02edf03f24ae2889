"""Falcon-H1 -> our ``Transformer``: in every block, attention and a Mamba-2 scan side by side on the same input.

Each block: x + attention(norm(x)) x ``attention_out_multiplier`` + Mamba-2(norm(x)) x ``ssm_out_multiplier``, then
a SwiGLU FFN. Its many muP multipliers scale linear maps, so they are folded into the weights they follow (the same
numbers up to the last bit of rounding): the attention's input (``attention_in_multiplier``: W_Q, W_K, W_V), its keys
(``key_multiplier``), its output (W_O), the scan's input (``ssm_in_multiplier``) and each part of its projection
(``ssm_multipliers``: z, x, B, C, dt), its output, the FFN's gate and down projection (``mlp_multipliers``). The
embedding's and the logits' multipliers are ours already (``embed_scale``, ``logit_scale``). The scan's gated norm
is optional (``mamba_rms_norm``) and may come before the gate (``mamba_norm_before_gate``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, get_bool, get_float, get_int, number
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.checkpoint.mamba_hybrids import _limit, _take_mamba
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "falcon_h1"
NAMES = {**{k: v for k, v in LLAMA_NAMES.items() if not k.startswith(("mlp.", "post_attention"))},
         "feed_forward.gate_proj": "mlp.W_gate", "feed_forward.up_proj": "mlp.W_in",
         "feed_forward.down_proj": "mlp.W_out", "pre_ff_layernorm": "ln2"}


def _numbers(hf: dict[str, Any], key: str, count: int) -> list[float]:
    value = hf.get(key) or [1.0] * count
    if not isinstance(value, list) or len(value) != count or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise CheckpointError(f"{FAMILY} config.json: {key} should list {count} numbers (got {value!r:.60})")
    return [float(v) for v in value]


def falcon_h1_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    if get_bool(hf, FAMILY, "mamba_proj_bias", False) or get_bool(hf, FAMILY, "projectors_bias", False):
        raise CheckpointError(f"{FAMILY}: Mamba projections with biases are not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{FAMILY} config.json: hidden_act {hf.get('hidden_act')!r:.30} is not supported")
    base, notes = llama_config(hf, FAMILY)
    d = base.d_model
    heads = get_int(hf, FAMILY, "mamba_n_heads", low=1)
    inner = hf.get("mamba_d_ssm") or get_int(hf, FAMILY, "mamba_expand", 2) * d
    d_head = hf.get("mamba_d_head")
    low, high = _limit(hf, FAMILY)
    norm = "none" if not get_bool(hf, FAMILY, "mamba_rms_norm", False) else (
        "before_gate" if get_bool(hf, FAMILY, "mamba_norm_before_gate", True) else "after_gate")
    cfg = dataclasses.replace(
        base, arch=FAMILY, parallel_ssm=True, attn_bias=get_bool(hf, FAMILY, "attention_bias", False),
        mlp_bias=get_bool(hf, FAMILY, "mlp_bias", False), embed_scale=number(hf, FAMILY, "embedding_multiplier", 1.0),
        logit_scale=number(hf, FAMILY, "lm_head_multiplier", 1.0), ssm_heads=heads,
        ssm_d_head=int(inner) // heads if d_head in (None, "auto") else int(d_head),
        ssm_groups=get_int(hf, FAMILY, "mamba_n_groups", 1, low=1), ssm_d_state=get_int(hf, FAMILY, "mamba_d_state"),
        ssm_chunk=get_int(hf, FAMILY, "mamba_chunk_size", 256, low=1), conv_kernel=get_int(hf, FAMILY, "mamba_d_conv", 4),
        conv_bias=get_bool(hf, FAMILY, "mamba_conv_bias", True), ssm_dt_min=low, ssm_dt_max=high, ssm_norm=norm)
    notes.append("Falcon-H1: each block runs attention and a Mamba-2 scan side by side (their outputs added); its "
                 "muP multipliers are folded into the weights they follow.")
    return cfg, notes


def _fold(out: dict[str, torch.Tensor], key: str, factor: float | torch.Tensor, bias: bool = True) -> None:
    """The linear map ``key`` times ``factor`` (its output; a new tensor: the source's stays untouched)."""
    weight = out[f"{key}.weight"]
    factor = factor if isinstance(factor, float) else factor.to(weight.dtype)
    out[f"{key}.weight"] = weight * (factor if isinstance(factor, float) else factor[:, None])
    if bias and f"{key}.bias" in out:
        out[f"{key}.bias"] = out[f"{key}.bias"] * factor


def _multipliers(hf: dict[str, Any], cfg: ModelConfig, t: Tensors, out: dict[str, torch.Tensor]) -> None:
    a_in, a_out = get_float(hf, FAMILY, "attention_in_multiplier", 1.0), get_float(hf, FAMILY, "attention_out_multiplier", 1.0)
    key, s_in = get_float(hf, FAMILY, "key_multiplier", 1.0), get_float(hf, FAMILY, "ssm_in_multiplier", 1.0)
    s_out = get_float(hf, FAMILY, "ssm_out_multiplier", 1.0)
    gate, down = _numbers(hf, "mlp_multipliers", 2)
    z, x, B, C, dt = _numbers(hf, "ssm_multipliers", 5)
    inner, gn = cfg.ssm_heads * cfg.ssm_d_head, cfg.ssm_groups * cfg.ssm_d_state
    mup = torch.cat([torch.full((n,), m) for n, m in ((inner, z), (inner, x), (gn, B), (gn, C), (cfg.ssm_heads, dt))])
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        _take_mamba(t, out, cfg, i, f"model.layers.{i}.mamba")
        for name in ("W_Q", "W_V"):
            _fold(out, p + f"attn.{name}", a_in, bias=False)
        _fold(out, p + "attn.W_K", a_in, bias=False)
        _fold(out, p + "attn.W_K", key)
        _fold(out, p + "attn.W_O", a_out)
        _fold(out, p + "mixer.W_in", mup)
        out[p + "mixer.W_in.weight"] = out[p + "mixer.W_in.weight"] * s_in
        _fold(out, p + "mixer.W_out", s_out)
        _fold(out, p + "mlp.W_gate", gate)
        _fold(out, p + "mlp.W_out", down)


def convert_falcon_h1(weights: dict[str, torch.Tensor], cfg: ModelConfig, hf: dict[str, Any]) -> dict[str, torch.Tensor]:
    weights = {("model.norm.weight" if k == "model.final_layernorm.weight" else k): v for k, v in weights.items()}
    return convert_llama(weights, cfg, FAMILY, NAMES, lambda t, out: _multipliers(hf, cfg, t, out))


FAMILIES = (Family(FAMILY, FAMILY, falcon_h1_config, convert_falcon_h1),)
