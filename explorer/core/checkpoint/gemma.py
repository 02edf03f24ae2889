"""Hugging Face Gemma, Gemma 2 and Gemma 3 (text) checkpoints -> our ``Transformer``.

Llama's layout (grouped-query attention, gated FFN, RMSNorm, rotary over the whole head) with:

* the embedding rows multiplied by sqrt(d_model) before the first block (``embed_scale``); the
  un-embedding is the tied, unscaled embedding matrix;
* RMSNorm multiplying by ``(1 + w)`` (Gemma stores w - 1: ``norm_offset`` 1);
* GeGLU: a gated FFN with the tanh-approximated GELU;
* Gemma 2 and 3: "sandwich" norms (``post_attention_layernorm`` and ``post_feedforward_layernorm``
  normalise each sublayer's output before it is added; ``pre_feedforward_layernorm`` is the FFN's
  input norm), scores scaled by ``query_pre_attn_scalar ** -0.5`` instead of 1/sqrt(d_head), and
  sliding-window layers (``layer_types``; Gemma 2: every other layer, Gemma 3: five of every six)
  whose queries see only the last ``sliding_window`` keys;
* Gemma 2: attention scores soft-capped, ``c * tanh(s / c)`` with c = ``attn_logit_softcapping``,
  before the mask and the softmax, and the logits soft-capped by ``final_logit_softcapping``;
* Gemma 3: RMSNorm of each head's q and k (``q_norm``, ``k_norm``), and two rotary bases: the
  sliding layers turn with ``rope_local_base_freq`` (10 000), the global ones with ``rope_theta``
  (1 000 000) and the checkpoint's RoPE scaling; a multimodal Gemma 3 (``gemma3``, 4B and larger)
  opens as its language model (``text_config``, ``language_model.*`` tensors), without the vision tower.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    activation,
    get_bool,
    get_float,
    get_int,
    language_model_weights,
    number,
    rope,
    rope_scaling,
    sliding_layers,
    window,
)
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import (
    LLAMA_NAMES,
    convert_llama,
    llama_config,
    llama_family,
)
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

SANDWICH_NAMES = {**LLAMA_NAMES, "post_attention_layernorm": "ln1_out", "pre_feedforward_layernorm": "ln2",
                  "post_feedforward_layernorm": "ln2_out"}


def _rope_sections(hf: dict[str, Any], family: str) -> tuple[float, dict[str, Any], float | None]:
    """(global base, global scaling, local base or None) from Gemma 3's per-layer-type rope_parameters
    or the older rope_theta / rope_scaling / rope_local_base_freq."""
    params = hf.get("rope_parameters") or {}
    if isinstance(params, dict) and "full_attention" in params:
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
        if rope_scaling(hf, family, local):
            raise CheckpointError(f"{family}: RoPE scaling of the sliding layers is not supported")
        return (float(full.get("rope_theta", 1_000_000.0)), rope_scaling(hf, family, full),
                float(local.get("rope_theta", 10_000.0)))
    scaling = rope_scaling(hf, family)
    theta = params.get("rope_theta", hf.get("rope_theta", 1_000_000.0))
    return float(theta), scaling, get_float(hf, family, "rope_local_base_freq", 10_000.0)


def gemma_config(hf: dict[str, Any], family: str) -> tuple[ModelConfig, list[str]]:
    base, notes = llama_config({**hf, "rope_parameters": None, "rope_scaling": None}, "gemma")
    act_key = "hidden_act" if family == "gemma" else "hidden_activation"
    act = hf.get(act_key) or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if family == "gemma" and act == "gelu":  # Gemma's first files said gelu and meant the tanh form
        act = "gelu_pytorch_tanh"
    switches: dict[str, Any] = dict(
        arch=family, activation=activation({"hidden_act": act}, family, "gelu_pytorch_tanh"),
        norm_offset=1.0, embed_scale=base.d_model ** 0.5, tie_embeddings=get_bool(hf, family, "tie_word_embeddings", True),
        attn_bias=get_bool(hf, family, "attention_bias", False), mlp_bias=False)
    if family != "gemma3_text":  # one rotary base for every layer
        theta, _ = rope(hf, family, ("rope_theta",), scaled_ok=True)
        switches.update(rotary_base=theta, rope_scaling=tuple(rope_scaling(hf, family).items()))
    else:
        theta, scaling, local = _rope_sections(hf, family)
        switches.update(rotary_base=theta, rope_scaling=tuple(scaling.items()), rotary_base_local=local,
                        qk_norm="head")
    if family != "gemma":
        n_layers = base.n_layers
        pattern = 2 if family == "gemma2" else get_int(hf, family, "sliding_window_pattern", 6)
        slide = window(hf, family)
        layers = sliding_layers(hf, family, n_layers, lambda i: bool((i + 1) % pattern)) if slide else ()
        scalar = number(hf, family, "query_pre_attn_scalar", 256)
        switches.update(norm_placement="sandwich", attn_scale=scalar ** -0.5, sliding_window=slide,
                        sliding_layers=layers, attn_softcap=number(hf, family, "attn_logit_softcapping"),
                        final_softcap=number(hf, family, "final_logit_softcapping"))
        if slide and layers:
            notes.append(f"{len(layers)} of {n_layers} layers attend within a sliding window of {slide} tokens "
                         "(shown in their attention masks).")
    return dataclasses.replace(base, **switches), notes


GEMMA3_DEFAULTS = {"max_position_embeddings": 131072, "vocab_size": 262208, "sliding_window": 4096}
_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def text_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's tensors of a multimodal Gemma 3 file, under the text model's names."""
    return language_model_weights(weights, _VISION_PREFIXES)


def gemma3_text_config(hf: dict[str, Any]) -> dict[str, Any]:
    """A multimodal Gemma 3's config.json (model_type gemma3: 4B and larger) -> its language model's part."""
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise CheckpointError("gemma3 config.json lacks its text_config")
    return {**GEMMA3_DEFAULTS, "tie_word_embeddings": hf.get("tie_word_embeddings", True), **text}


def multimodal_gemma3_config(text: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    cfg, notes = gemma_config(text, "gemma3_text")
    notes.append("A multimodal Gemma 3: its language model is loaded; the vision tower and image projector are "
                 "not (text prompts only).")
    return cfg, notes


FAMILIES = (
    llama_family("gemma", lambda hf: gemma_config(hf, "gemma"), LLAMA_NAMES),
    llama_family("gemma2", lambda hf: gemma_config(hf, "gemma2"), SANDWICH_NAMES),
    llama_family("gemma3_text", lambda hf: gemma_config({**GEMMA3_DEFAULTS, **hf}, "gemma3_text"), SANDWICH_NAMES),
    Family("gemma3", "gemma3", multimodal_gemma3_config,
           lambda w, c, hf: convert_llama(text_weights(w), c, "gemma3", SANDWICH_NAMES),
           text_config=gemma3_text_config),  # the language model, without the vision tower
)
