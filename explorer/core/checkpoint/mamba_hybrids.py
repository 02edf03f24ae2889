"""Mamba-2 hybrids -> our ``Transformer``: Granite 4 (``granitemoehybrid``) and Nemotron-H (``nemotron_h``).

Their ``linear_attention`` layers are Mamba-2 (core/mixers/mamba2.py): one projection gives z, x, B, C and dt; x, B
and C pass a short convolution (``mamba_d_conv`` / ``conv_kernel``, with a bias) and SiLU; the scan runs per head
(``mamba_n_heads`` of ``mamba_d_head``, B and C per group of heads, a state of ``mamba_d_state``); y times SiLU(z) is
RMS-normed per group, then projected out. The step size is clamped to ``time_step_limit`` (Nemotron-H: from
``time_step_min``, as its layer does).

* Granite 4: Granite's multipliers (embedding, attention, residual, logits; granite.py); every block is a mixer
  (Mamba-2 or attention, rotary only where ``position_embedding_type`` is "rope") then an FFN: the gated
  ``shared_mlp`` (fused ``input_linear``), plus, with ``num_local_experts``, a mixture of experts (top-k of the
  logits, then softmax: GraniteMoE's) beside it as its shared expert;
* Nemotron-H: each block is one thing (``layers_block_type``): a Mamba-2 layer, an attention layer (no positions:
  no rotary anywhere), or an FFN (up, squared ReLU, down) - ours are blocks with a mixer and no FFN, or an FFN and
  no mixer; its experts blocks (``moe``) are refused for now.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, expected_shapes, get_bool, get_float, get_int
from explorer.core.checkpoint.experts import moe_keys, moe_note, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.granite import granite_config
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.checkpoint.mixtral import GRANITE
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError


def _limit(hf: dict[str, Any], family: str) -> tuple[float, float | None]:
    """time_step_limit as (low, high or None for no limit): JSON writes infinity as a string or an object."""
    value = hf.get("time_step_limit") or (0.0, None)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise CheckpointError(f"{family} config.json: time_step_limit should be [low, high] (got {value!r:.60})")

    def number(v: Any) -> float | None:
        if isinstance(v, dict):
            v = v.get("__float__")
        if v is None or (isinstance(v, str) and v.lower() in ("inf", "infinity")) or v == math.inf:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise CheckpointError(f"{family} config.json: time_step_limit should hold numbers (got {value!r:.60})")
        return float(v)

    low, high = number(value[0]), number(value[1])
    return low or 0.0, high


_PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}  # Nemotron-H's older files


def _types(hf: dict[str, Any], family: str, n_layers: int | None, known: tuple[str, ...]) -> list[str]:
    types = hf.get("layer_types") or hf.get("layers_block_type")
    pattern = hf.get("hybrid_override_pattern")
    if types is None and isinstance(pattern, str) and set(pattern) <= set(_PATTERN):
        types = [_PATTERN[c] for c in pattern]
    if not isinstance(types, list) or (n_layers is not None and len(types) != n_layers) or any(
            t not in known for t in types):
        raise CheckpointError(f"{family} config.json: layer_types should list "
                              f"{n_layers if n_layers is not None else 'each layer'} of {known} (got {types!r:.80})")
    return types


def _mamba_keys(hf: dict[str, Any], family: str, d: int, names: dict[str, str]) -> dict[str, Any]:
    """The ModelConfig keys of the Mamba-2 layers, read under the family's names."""
    heads = get_int(hf, family, names["heads"], low=1)
    d_head = hf.get(names["d_head"])
    if d_head in (None, "auto"):
        d_head = get_int(hf, family, "mamba_expand", 2) * d // heads
    act = hf.get(names["act"], "silu")
    if act != "silu":
        raise CheckpointError(f"{family} config.json: Mamba activation {act!r:.30} is not supported (silu is)")
    return dict(ssm_heads=heads, ssm_d_head=int(d_head), ssm_groups=get_int(hf, family, names["groups"], 1, low=1),
                ssm_d_state=get_int(hf, family, names["state"], low=1), ssm_chunk=get_int(hf, family, names["chunk"],
                                                                                            256, low=1),
                conv_kernel=get_int(hf, family, names["conv"], 4, low=1),
                conv_bias=get_bool(hf, family, names["conv_bias"], True),
                mixer_bias=get_bool(hf, family, names["bias"], False))


GRANITE4 = dict(heads="mamba_n_heads", d_head="mamba_d_head", act="hidden_act", groups="mamba_n_groups",
                state="mamba_d_state", chunk="mamba_chunk_size", conv="mamba_d_conv", conv_bias="mamba_conv_bias",
                bias="mamba_proj_bias")
NEMOTRON = dict(heads="mamba_num_heads", d_head="mamba_head_dim", act="mamba_hidden_act", groups="n_groups",
                state="ssm_state_size", chunk="chunk_size", conv="conv_kernel", conv_bias="use_conv_bias",
                bias="use_bias")


def granite4_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "granitemoehybrid"
    shared = get_int(hf, family, "shared_intermediate_size", low=1)
    base, notes = granite_config({**hf, "intermediate_size": shared}, family)
    L = base.n_layers
    types = _types(hf, family, L, ("linear_attention", "full_attention"))
    low, high = _limit(hf, family)
    switches: dict[str, Any] = dict(
        layer_mixers=tuple("mamba2" if t == "linear_attention" else "attention" for t in types),
        positions="rotary" if hf.get("position_embedding_type") == "rope" else "none",
        ssm_dt_min=low, ssm_dt_max=high, **_mamba_keys(hf, family, base.d_model, GRANITE4))
    experts = get_int(hf, family, "num_local_experts", 0)
    if experts:
        switches.update(moe_keys(hf, family, L, list(range(L)), get_int(hf, family, "intermediate_size"),
                                 "topk_softmax", d_shared=shared))
        notes.append(moe_note(L, L, experts, switches["experts_per_token"], True))
    cfg = dataclasses.replace(base, **switches)
    notes.append(f"{types.count('linear_attention')} of {L} layers are Mamba-2 (a state-space scan: their effective "
                 "attention is derived exactly); the others attend" + ("." if cfg.positions == "rotary" else
                                                                       ", without positions."))
    return cfg, notes


def nemotron_h_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "nemotron_h"
    types = _types(hf, family, None, ("linear_attention", "full_attention", "mlp", "moe"))
    if "moe" in types:
        raise CheckpointError("nemotron_h: its mixture-of-experts blocks are not supported yet")
    L = len(types)
    base, notes = llama_config({**hf, "num_hidden_layers": L, "rms_norm_eps": hf.get("layer_norm_epsilon", 1e-5),
                                "hidden_act": "silu"}, family)
    act = hf.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        raise CheckpointError(f"nemotron_h config.json: mlp_hidden_act {act!r:.30} is not supported (relu2 is)")
    cfg = dataclasses.replace(
        base, arch=family, positions="none", gated_ffn=False, activation="relu2",
        mlp_bias=get_bool(hf, family, "mlp_bias", False), attn_bias=get_bool(hf, family, "attention_bias", False),
        layer_mixers=tuple({"linear_attention": "mamba2", "full_attention": "attention", "mlp": "none"}[t]
                           for t in types),
        ffn_free_layers=tuple(i for i, t in enumerate(types) if t != "mlp"),
        ssm_dt_min=get_float(hf, family, "time_step_min", 0.001), ssm_dt_max=None,
        **_mamba_keys(hf, family, base.d_model, NEMOTRON))
    notes.append(f"Nemotron-H's {L} blocks are each one piece: {types.count('linear_attention')} Mamba-2 layers, "
                 f"{types.count('full_attention')} attention layers (no positions) and {types.count('mlp')} FFNs.")
    return cfg, notes


def _take_mamba(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig, layer: int, theirs: str) -> None:
    shapes = expected_shapes(cfg)
    ours = f"blocks.{layer}.mixer"
    for name, mine in (("dt_bias", "dt_bias"), ("A_log", "A_log"), ("D", "D"), ("norm.weight", "norm")):
        if f"{ours}.{mine}" in shapes:  # (Falcon-H1 may have no norm)
            out[f"{ours}.{mine}"] = t.take(f"{theirs}.{name}", shapes[f"{ours}.{mine}"])
    conv = shapes[f"{ours}.conv"]
    out[f"{ours}.conv"] = t.take(f"{theirs}.conv1d.weight", (conv[0], 1, conv[1]))[:, 0]
    if cfg.conv_bias:
        out[f"{ours}.conv_b"] = t.take(f"{theirs}.conv1d.bias", (conv[0],))
    for proj in ("in_proj", "out_proj"):
        for kind in ("weight", "bias") if cfg.mixer_bias else ("weight",):
            key = f"{ours}.W_{proj.split('_')[0]}.{kind}"
            out[key] = t.take(f"{theirs}.{proj}.{kind}", shapes[key])


def _granite4_rest(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    shapes = expected_shapes(cfg)
    for plan in cfg.plan:
        i = plan.layer
        if plan.mixer == "mamba2":
            _take_mamba(t, out, cfg, i, f"model.layers.{i}.mamba")
        mlp = f"blocks.{i}.moe.shared" if plan.is_moe else f"blocks.{i}.mlp"
        width = shapes[f"{mlp}.W_out.weight"][1]
        fused = t.take(f"model.layers.{i}.shared_mlp.input_linear.weight", (2 * width, cfg.d_model))
        out[f"{mlp}.W_gate.weight"], out[f"{mlp}.W_in.weight"] = fused[:width], fused[width:]
        out[f"{mlp}.W_out.weight"] = t.take(f"model.layers.{i}.shared_mlp.output_linear.weight", (cfg.d_model, width))
    if cfg.moe_layers:
        take_moe(t, out, cfg, GRANITE)


def convert_granite4(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    names = {k: v for k, v in LLAMA_NAMES.items() if not k.startswith("mlp.")}
    return convert_llama(weights, cfg, "granitemoehybrid", names, lambda t, out: _granite4_rest(t, out, cfg))


def convert_nemotron_h(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    renamed = {}
    for name, tensor in weights.items():  # its names -> Llama's (a block's one norm: ln1, or ln2 before an FFN)
        name = "model." + name[len("backbone."):] if name.startswith("backbone.") else name  # the files' prefix
        name = {"model.embeddings.weight": "model.embed_tokens.weight", "model.norm_f.weight": "model.norm.weight"}.get(
            name, name)
        if name.startswith("model.layers.") and ".mixer." in name:
            layer = int(name.split(".")[2])
            kind = cfg.layer(layer).mixer
            name = name.replace(".mixer.", ".self_attn." if kind == "attention" else ".mlp." if kind == "none"
                                else ".mamba.")
        elif name.startswith("model.layers.") and name.endswith(".norm.weight") and name.count(".") == 4:
            layer = int(name.split(".")[2])
            name = name.replace(".norm.", ".input_layernorm." if cfg.layer(layer).mixer != "none"
                                else ".post_attention_layernorm.")
        renamed[name] = tensor
    names = {**LLAMA_NAMES, "mlp.up_proj": "mlp.W_in", "mlp.down_proj": "mlp.W_out"}

    def rest(t: Tensors, out: dict[str, torch.Tensor]) -> None:
        for plan in cfg.plan:
            if plan.mixer == "mamba2":
                _take_mamba(t, out, cfg, plan.layer, f"model.layers.{plan.layer}.mamba")

    return convert_llama(renamed, cfg, "nemotron_h", names, rest)


FAMILIES = (Family("granitemoehybrid", "granite4", granite4_config, lambda w, c, hf: convert_granite4(w, c)),
            Family("nemotron_h", "nemotron_h", nemotron_h_config, lambda w, c, hf: convert_nemotron_h(w, c)))
