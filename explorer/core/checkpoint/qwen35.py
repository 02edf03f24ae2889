"""Qwen3.5 / 3.6 (dense; ``qwen3_5_text``, and the ``qwen3_5`` multimodal wrapper's language model) and
Qwen3-Next (``qwen3_next``: the same layers with a mixture of experts) -> our ``Transformer``.

Llama's layout (pre-norm RMSNorm, SwiGLU, grouped-query attention), layer by layer as ``layer_types`` says:

* ``linear_attention`` layers (three of every four) are Gated DeltaNet (core/mixers/deltanet.py): q, k and v
  through a short convolution (``linear_conv_kernel_dim``), ``linear_num_key_heads`` q/k heads of
  ``linear_key_head_dim`` and ``linear_num_value_heads`` v heads of ``linear_value_head_dim``;
* ``full_attention`` layers: q/k RMS-normed per head, rotary on the first ``partial_rotary_factor`` of each head
  (Qwen3.5's mRoPE: the same angles for text, whose three position ids are equal), and each head's output times
  sigmoid of a second half of ``q_proj`` (the output gate: ``W_G``);
* every RMSNorm multiplies by (1 + w) (``norm_offset`` 1) except the DeltaNet's own gated norm (w);
* Qwen3-Next stores q, k, v, z (and b, a) interleaved per key head (``in_proj_qkvz``, ``in_proj_ba``); they are
  put in Qwen3.5's order. Its FFNs are a mixture of experts with a sigmoid-gated shared expert (qwen_moe.py's rule).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, get_bool, get_int, language_model_weights, rope, rotary_dim
from explorer.core.checkpoint.experts import moe_keys, moe_note, norm_topk, take_moe
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import LLAMA_NAMES, convert_llama, llama_config
from explorer.core.checkpoint.qwen_moe import QWEN_MOE, _sparse_layers
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

NAMES = {**{k: v for k, v in LLAMA_NAMES.items() if k != "self_attn.q_proj"},
         "linear_attn.in_proj_qkv": "mixer.W_qkv", "linear_attn.in_proj_z": "mixer.W_z",
         "linear_attn.in_proj_b": "mixer.W_b", "linear_attn.in_proj_a": "mixer.W_a",
         "linear_attn.out_proj": "mixer.W_out"}
NEXT_NAMES = {k: v for k, v in NAMES.items() if not k.startswith("linear_attn.in_proj")}  # (interleaved there)
_MIXERS = {"linear_attention": "deltanet", "full_attention": "attention"}


def layer_types(hf: dict[str, Any], family: str, n_layers: int) -> list[str]:
    types = hf.get("layer_types")
    if types is None:
        interval = get_int(hf, family, "full_attention_interval", 4, low=1)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or any(t not in _MIXERS for t in types):
        raise CheckpointError(f"{family} config.json: layer_types should list {n_layers} of {tuple(_MIXERS)} "
                              f"(got {types!r:.80})")
    return types


def qwen35_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    params = hf.get("rope_parameters") or {}
    plain = {k: v for k, v in params.items() if k not in ("mrope_section", "mrope_interleaved")} if isinstance(
        params, dict) else params
    base, notes = llama_config({**hf, "rope_parameters": plain}, family)
    L = base.n_layers
    types = layer_types(hf, family, L)
    _, partial = rope({**hf, "rope_parameters": plain}, family, ("rope_theta",), scaled_ok=True)
    switches: dict[str, Any] = dict(
        arch=family, norm_offset=1.0, qk_norm="head", attn_output_gate=True,
        attn_bias=get_bool(hf, family, "attention_bias", False),
        rotary_dim=rotary_dim(base.d_head, 0.25 if partial is None else partial, family),
        layer_mixers=tuple(_MIXERS[t] for t in types), conv_kernel=get_int(hf, family, "linear_conv_kernel_dim", 4),
        delta_k_heads=get_int(hf, family, "linear_num_key_heads"), delta_v_heads=get_int(hf, family,
                                                                                          "linear_num_value_heads"),
        delta_d_k=get_int(hf, family, "linear_key_head_dim"), delta_d_v=get_int(hf, family, "linear_value_head_dim"))
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{family} config.json: hidden_act {hf.get('hidden_act')!r:.40} is not supported (silu is)")
    n_delta = types.count("linear_attention")
    notes.append(f"{n_delta} of {L} layers are Gated DeltaNet (a recurrent memory instead of attention: their "
                 "effective attention is derived exactly); the others attend with an output gate.")
    if family == "qwen3_next":
        moe = moe_keys(hf, family, L, _sparse_layers(hf, family, L), get_int(hf, family, "moe_intermediate_size"),
                       "softmax_topk", moe_norm_topk=norm_topk(hf, family, True))
        shared = get_int(hf, family, "shared_expert_intermediate_size", 0)
        switches.update(moe, d_shared=shared, moe_shared_gate=bool(shared))
        notes.append(moe_note(len(moe["moe_layers"]), L, moe["n_experts"], moe["experts_per_token"], bool(shared)))
    return dataclasses.replace(base, **switches), notes


def _take_special(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    """What the names do not cover: the attention's q_proj (query and gate interleaved per head), the DeltaNet's
    convolution (stored [C, 1, K]), dt_bias and A_log; Qwen3-Next's interleaved projections."""
    for plan in cfg.plan:
        i, theirs = plan.layer, f"model.layers.{plan.layer}"
        if plan.is_attention:
            H, dh = plan.n_heads, plan.d_head
            for kind, shape in (("weight", (2 * H * dh, cfg.d_model)), ("bias", (2 * H * dh,)))[:1 + cfg.attn_bias]:
                both = t.take(f"{theirs}.self_attn.q_proj.{kind}", shape).reshape(H, 2, dh, *shape[1:])
                out[f"blocks.{i}.attn.W_Q.{kind}"] = both[:, 0].reshape(H * dh, *both.shape[3:]).contiguous()
                out[f"blocks.{i}.attn.W_G.{kind}"] = both[:, 1].reshape(H * dh, *both.shape[3:]).contiguous()
            continue
        mix = f"{theirs}.linear_attn"
        conv_dim = 2 * cfg.delta_k_heads * cfg.delta_d_k + cfg.delta_v_heads * cfg.delta_d_v
        out[f"blocks.{i}.mixer.conv"] = t.take(f"{mix}.conv1d.weight", (conv_dim, 1, cfg.conv_kernel))[:, 0].contiguous()
        for name in ("dt_bias", "A_log"):
            out[f"blocks.{i}.mixer.{name}"] = t.take(f"{mix}.{name}", (cfg.delta_v_heads,))
        out[f"blocks.{i}.mixer.norm"] = t.take(f"{mix}.norm.weight", (cfg.delta_d_v,))
        if f"{mix}.in_proj_qkvz.weight" in t.sd:  # Qwen3-Next
            _next_projections(t, out, cfg, i, mix)
    if cfg.moe_layers:
        take_moe(t, out, cfg, QWEN_MOE)


def _next_projections(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig, i: int, mix: str) -> None:
    """Qwen3-Next's in_proj_qkvz / in_proj_ba, grouped per key head (q, k, then the group's v and z heads), as
    Qwen3.5's separate W_qkv, W_z, W_b, W_a."""
    Hk, Hv, dk, dv, d = cfg.delta_k_heads, cfg.delta_v_heads, cfg.delta_d_k, cfg.delta_d_v, cfg.d_model
    g = Hv // Hk
    qkvz = t.take(f"{mix}.in_proj_qkvz.weight", (2 * Hk * dk + 2 * Hv * dv, d)).reshape(Hk, 2 * dk + 2 * g * dv, d)
    q, k, v, z = torch.split(qkvz, [dk, dk, g * dv, g * dv], dim=1)
    out[f"blocks.{i}.mixer.W_qkv.weight"] = torch.cat([x.reshape(-1, d) for x in (q, k, v)]).contiguous()
    out[f"blocks.{i}.mixer.W_z.weight"] = z.reshape(-1, d).contiguous()
    b, a = torch.split(t.take(f"{mix}.in_proj_ba.weight", (2 * Hv, d)).reshape(Hk, 2 * g, d), [g, g], dim=1)
    out[f"blocks.{i}.mixer.W_b.weight"], out[f"blocks.{i}.mixer.W_a.weight"] = b.reshape(Hv, d), a.reshape(Hv, d)


def convert_qwen35(weights: dict[str, torch.Tensor], cfg: ModelConfig, family: str) -> dict[str, torch.Tensor]:
    names = NEXT_NAMES if family == "qwen3_next" else NAMES
    return convert_llama(weights, cfg, family, names, lambda t, out: _take_special(t, out, cfg))


_SKIPPED = ("model.visual.", "visual.", "mtp.", "model.mtp.")


def text_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's tensors of a multimodal Qwen3.5 file (the vision tower and the multi-token
    prediction head dropped), under the text model's names."""
    return language_model_weights(weights, _SKIPPED)


def qwen35_text_config(hf: dict[str, Any]) -> dict[str, Any]:
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise CheckpointError("qwen3_5 config.json lacks its text_config")
    return {**text, "tie_word_embeddings": hf.get("tie_word_embeddings", False)}  # the wrapper's flag decides


FAMILIES = (
    Family("qwen3_5_text", "qwen3_5", lambda hf: qwen35_config(hf, "qwen3_5_text"),
           lambda w, c, hf: convert_qwen35(text_weights(w), c, "qwen3_5_text")),
    Family("qwen3_5", "qwen3_5", lambda hf: qwen35_config(hf, "qwen3_5_text"),
           lambda w, c, hf: convert_qwen35(text_weights(w), c, "qwen3_5"), text_config=qwen35_text_config),
    Family("qwen3_next", "qwen3_next", lambda hf: qwen35_config(hf, "qwen3_next"),
           lambda w, c, hf: convert_qwen35(w, c, "qwen3_next")),
)
