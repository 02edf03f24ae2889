"""What the mixture-of-experts families share: their config keys for the router, and their expert tensors.

A family record (mixtral.py, qwen_moe.py, gpt_oss.py, deepseek.py, llama4.py) says where its MoE lives inside a
layer and how its experts are stored (``MoELayout``); ``take_moe`` then takes every MoE block's router,
expert bank and shared expert, whichever form the tensors come in:

* files as the hub holds them (and as transformers' ``save_pretrained`` writes them): one tensor per expert
  and projection (``experts.{e}.w1.weight``, ``experts.{e}.gate_proj.weight``, ...), or the family's own fused
  form (GraniteMoE's ``input_linear``, gpt-oss's and Llama 4's 3-D ``gate_up_proj``);
* a ``transformers`` model in memory (``model.state_dict()``), whose experts are fused 3-D tensors
  (``experts.gate_up_proj`` [E, 2f, d] and ``experts.down_proj`` [E, d, f], or transposed);
* a GGUF file (llama.cpp's layout, ``gguf_archs``): three stacked banks ``experts.gate_proj.weight``,
  ``up_proj`` [E, f, d] and ``down_proj`` [E, d, f] (gpt-oss: with ``.bias`` [E, f] / [E, d]), taken as
  they are, so a bank the load keeps quantised passes through as one tensor (core/quant/storage.py).

Ours (core/moe.py): ``moe.router.weight`` [E, d] (+ ``bias``, ``choice_bias``), ``moe.experts.W_gate`` /
``W_in`` [E, f, d], ``W_out`` [E, d, f] (+ gpt-oss's biases), ``moe.shared.*`` and ``moe.shared_gate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, expected_shapes, get_bool, get_float, get_int
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError


@dataclass(frozen=True)
class MoELayout:
    """Where a family's MoE sits inside ``model.layers.{i}`` and how its experts are stored."""

    blocks: tuple[str, ...] = ("mlp",)           # the MoE module's names (files, then transformers' memory form)
    routers: tuple[str, ...] = ("gate",)         # the router's names inside it
    per_expert: tuple[str, str, str] | None = ("gate_proj", "up_proj", "down_proj")  # files: gate, up, down
    fused: str = "concat"        # concat: gate_up [E, 2f, d]; concat_t: [E, d, 2f] (Llama 4); interleaved_t: gpt-oss
    shared: str | None = None    # the shared expert's module ("shared_expert", "shared_experts")
    shared_gate: str | None = None


def take_moe(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig, layout: MoELayout) -> None:
    """Every MoE block's tensors, ours by name, each checked against the shape our model needs."""
    shapes = expected_shapes(cfg)
    for layer in cfg.moe_layers:
        base = _block(t, layer, layout)
        ours = f"blocks.{layer}.moe"
        router = next((f"{base}.{r}" for r in layout.routers if f"{base}.{r}.weight" in t.sd), f"{base}.gate")
        out[f"{ours}.router.weight"] = t.take(f"{router}.weight", shapes[f"{ours}.router.weight"])
        if f"{ours}.router.bias" in shapes:
            out[f"{ours}.router.bias"] = t.take(f"{router}.bias", shapes[f"{ours}.router.bias"])
        if f"{ours}.router.choice_bias" in shapes:
            out[f"{ours}.router.choice_bias"] = t.take(f"{router}.e_score_correction_bias",
                                                       shapes[f"{ours}.router.choice_bias"])
        out.update(_experts(t, cfg, base, layout, ours))
        if layout.shared is not None and cfg.d_shared:
            for theirs, mine in (("gate_proj", "W_gate"), ("up_proj", "W_in"), ("down_proj", "W_out")):
                key = f"{ours}.shared.{mine}.weight"
                out[key] = t.take(f"{base}.{layout.shared}.{theirs}.weight", shapes[key])
        if layout.shared_gate is not None and cfg.moe_shared_gate:
            key = f"{ours}.shared_gate.weight"
            out[key] = t.take(f"{base}.{layout.shared_gate}.weight", shapes[key])


def _block(t: Tensors, layer: int, layout: MoELayout) -> str:
    for block in layout.blocks:
        prefix = f"model.layers.{layer}.{block}."
        if any(name.startswith(prefix) for name in t.sd):
            return prefix[:-1]
    raise CheckpointError(f"{t.family} checkpoint lacks layer {layer}'s experts "
                          f"(model.layers.{layer}.{layout.blocks[0]}.*)")


def _experts(t: Tensors, cfg: ModelConfig, base: str, layout: MoELayout, ours: str) -> dict[str, torch.Tensor]:
    E, f, d = cfg.n_experts, cfg.d_expert, cfg.d_model
    found: dict[str, torch.Tensor] = {}
    if f"{base}.experts.gate_proj.weight" in t.sd:                         # GGUF: three stacked banks, as they are
        for theirs, mine, shape in (("gate_proj", "W_gate", (E, f, d)), ("up_proj", "W_in", (E, f, d)),
                                    ("down_proj", "W_out", (E, d, f))):
            found[mine] = t.take(f"{base}.experts.{theirs}.weight", shape)
            if cfg.moe_expert_bias:                                         # gpt-oss
                found[mine.replace("W_", "b_")] = t.take(f"{base}.experts.{theirs}.bias", shape[:2])
    elif f"{base}.experts.gate_up_proj" in t.sd or f"{base}.input_linear.weight" in t.sd:
        granite = f"{base}.input_linear.weight" in t.sd
        transposed = layout.fused in ("concat_t", "interleaved_t") and not granite
        gate_up = t.take(f"{base}.input_linear.weight" if granite else f"{base}.experts.gate_up_proj",
                         (E, d, 2 * f) if transposed else (E, 2 * f, d))
        down = t.take(f"{base}.output_linear.weight" if granite else f"{base}.experts.down_proj",
                      (E, f, d) if transposed else (E, d, f))
        if transposed:
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)    # -> [E, 2f, d], [E, d, f]
        if layout.fused == "interleaved_t":                                 # gpt-oss: gate, up, gate, up, ...
            found["W_gate"], found["W_in"] = gate_up[:, 0::2], gate_up[:, 1::2]
        else:
            found["W_gate"], found["W_in"] = gate_up[:, :f], gate_up[:, f:]
        found["W_out"] = down
        if cfg.moe_expert_bias:
            bias = t.take(f"{base}.experts.gate_up_proj_bias", (E, 2 * f))
            found["b_gate"], found["b_in"] = bias[:, 0::2], bias[:, 1::2]
            found["b_out"] = t.take(f"{base}.experts.down_proj_bias", (E, d))
    elif layout.per_expert is not None:
        gate, up, down = layout.per_expert
        for theirs, mine, shape in ((gate, "W_gate", (f, d)), (up, "W_in", (f, d)), (down, "W_out", (d, f))):
            found[mine] = torch.stack([t.take(f"{base}.experts.{e}.{theirs}.weight", shape) for e in range(E)])
    else:
        raise CheckpointError(f"{t.family} checkpoint lacks the experts of {base} ({base}.experts.gate_up_proj)")
    # the gate and up halves of a [E, 2f, d] tensor stay views (each expert's [f, d] rows are contiguous: no copy
    # of the largest tensors); transposed or interleaved ones are laid out once, as the forward pass reads them
    keep = layout.fused == "concat" and "W_gate" in found and found["W_gate"][0].is_contiguous()
    return {f"{ours}.experts.{name}": tensor if keep else tensor.contiguous() for name, tensor in found.items()}


EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")  # families (and versions) differ


def moe_keys(hf: dict[str, Any], family: str, n_layers: int, moe: list[int], d_expert: int, router: str,
             **switches: Any) -> dict[str, Any]:
    """The ModelConfig keys of a mixture of experts read from config.json, checked: the number of routed
    experts (under whichever name the file uses), the router, k, the expert width, which layers are MoE."""
    experts_key = next((key for key in EXPERT_COUNT_KEYS if hf.get(key) is not None), EXPERT_COUNT_KEYS[0])
    n_experts = get_int(hf, family, experts_key)
    k = get_int(hf, family, "num_experts_per_tok")
    if not moe or not n_experts:
        raise CheckpointError(f"{family} config.json: no layer is a mixture of experts ({experts_key} {n_experts})")
    return dict(moe_layers=tuple(moe), n_experts=n_experts, experts_per_token=k, d_expert=d_expert,
                moe_router=router, **switches)


def norm_topk(hf: dict[str, Any], family: str, default: bool) -> bool:
    """norm_topk_prob (null: the family's default)."""
    return default if hf.get("norm_topk_prob") is None else get_bool(hf, family, "norm_topk_prob")


def routed_scale(hf: dict[str, Any], family: str) -> float:
    value = get_float(hf, family, "routed_scaling_factor", 1.0)
    if value <= 0:
        raise CheckpointError(f"{family} config.json: routed_scaling_factor should be positive (got {value})")
    return value


def moe_note(n_moe: int, n_layers: int, n_experts: int, k: int, shared: bool) -> str:
    where = "every layer" if n_moe == n_layers else f"{n_moe} of {n_layers} layers"
    return (f"A mixture of experts on {where}: each token goes to {k} of {n_experts} experts"
            + (" and a shared expert" if shared else "") + " (the Experts keys show which, and with what weight).")


def drop_extra_layers(weights: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """The weights without the layers a checkpoint holds beyond ``n_layers`` (DeepSeek-V3's and GLM-4.5's
    multi-token-prediction layers: they draft further tokens; the next-token logits do not use them)."""
    for key in [k for k in weights if k.startswith("model.layers.") and k.split(".")[2].isdigit()
                and int(k.split(".")[2]) >= n_layers]:
        del weights[key]
    return weights
