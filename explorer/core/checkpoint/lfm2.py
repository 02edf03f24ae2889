"""LFM2 (Liquid) -> our ``Transformer``: short gated convolutions beside grouped-query attention.

Llama's pre-norm layout (RMSNorm with weight w, SwiGLU: ``w1`` gate, ``w3`` up, ``w2`` down), layer by layer as
``layer_types`` says (or ``full_attn_idxs``):

* ``conv`` layers: LFM2's short convolution (core/mixers/short_conv.py): B, C, x from one projection, C times a
  depthwise causal convolution of width ``conv_L_cache`` over B * x, then out_proj;
* ``full_attention`` layers: q and k RMS-normed per head (``q_layernorm``, ``k_layernorm``), rotary positions;
* the FFN width is ``intermediate_size`` adjusted as the family does (``block_auto_adjust_ff_dim``: two thirds,
  times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``);
* the final norm is stored as ``embedding_norm``; the un-embedding is tied unless the file says otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, get_bool, get_float, get_int
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "lfm2"
NAMES = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
         "self_attn.out_proj": "attn.W_O", "self_attn.q_layernorm": "attn.q_norm",
         "self_attn.k_layernorm": "attn.k_norm", "feed_forward.w1": "mlp.W_gate", "feed_forward.w3": "mlp.W_in",
         "feed_forward.w2": "mlp.W_out", "operator_norm": "ln1", "ffn_norm": "ln2", "conv.in_proj": "mixer.W_in",
         "conv.out_proj": "mixer.W_out"}


def ffn_width(hf: dict[str, Any]) -> int:
    width = get_int(hf, FAMILY, "intermediate_size", hf.get("block_ff_dim", 12288))
    if hf.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = hf.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            multiple = get_int(hf, FAMILY, "block_multiple_of", 256, low=1)
            width = int(get_float(hf, FAMILY, "block_ffn_dim_multiplier", 1.0) * width)
            width = multiple * ((width + multiple - 1) // multiple)
    return width


def lfm2_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    L = get_int(hf, FAMILY, "num_hidden_layers")
    types = hf.get("layer_types")
    if types is None:
        full = hf.get("full_attn_idxs")
        types = ["full_attention" if full is None or i in full else "conv" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("full_attention", "conv") for t in types):
        raise CheckpointError(f"{FAMILY} config.json: layer_types should list {L} of full_attention, conv "
                              f"(got {types!r:.80})")
    base, notes = llama_config({**hf, "intermediate_size": ffn_width(hf), "rms_norm_eps": hf.get("norm_eps", 1e-5),
                                "rope_theta": hf.get("rope_theta", 1_000_000.0)}, FAMILY)
    tied = hf.get("tie_word_embeddings", hf.get("tie_embedding", True))
    cfg = dataclasses.replace(
        base, arch=FAMILY, qk_norm="head", layer_mixers=tuple("attention" if t == "full_attention" else "short_conv"
                                                                for t in types),
        conv_kernel=get_int(hf, FAMILY, "conv_L_cache", 3, low=1), conv_bias=get_bool(hf, FAMILY, "conv_bias", False),
        mixer_bias=get_bool(hf, FAMILY, "conv_bias", False), tie_embeddings=bool(tied))
    notes.append(f"{types.count('conv')} of {L} layers are short gated convolutions (each channel mixes the last "
                 f"{cfg.conv_kernel} tokens: their effective attention is a band); the others attend.")
    return cfg, notes


def _take_rest(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    for plan in cfg.plan:
        if plan.mixer == "short_conv":
            i, d = plan.layer, cfg.d_model
            out[f"blocks.{i}.mixer.conv"] = t.take(f"model.layers.{i}.conv.conv.weight", (d, 1, cfg.conv_kernel))[:, 0]
            if cfg.conv_bias:
                out[f"blocks.{i}.mixer.conv_b"] = t.take(f"model.layers.{i}.conv.conv.bias", (d,))


def convert_lfm2(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    weights = {("model.norm.weight" if k == "model.embedding_norm.weight" else k): v for k, v in weights.items()}
    return convert_llama(weights, cfg, FAMILY, NAMES, lambda t, out: _take_rest(t, out, cfg))


FAMILIES = (Family(FAMILY, FAMILY, lfm2_config, lambda w, c, hf: convert_lfm2(w, c)),)
