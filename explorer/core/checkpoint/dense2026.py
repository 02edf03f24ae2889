"""Dense decoders of 2025-26 whose layers differ -> our ``Transformer``: SmolLM3, OLMo 3, EXAONE 4, and Mistral
Small 3's ``mistral3`` files (a Mistral text model inside a vision wrapper).

Each is Llama's (or OLMo 2's) layout; what differs from layer to layer goes into the per-layer plan:

* SmolLM3: every fourth layer has no rotary positions (``no_rope_layers[i]`` 0: NoPE); with
  ``use_sliding_window`` those NoPE layers attend within ``sliding_window``;
* OLMo 3: OLMo 2 (norms on each sublayer's output, q and k RMS-normed over all heads) with a sliding window on the
  layers ``layer_types`` says (three of every four), and RoPE per kind of layer (``rope_parameters`` by layer type:
  YaRN on the full layers only; the sliding ones turn with their own, unscaled, base);
* EXAONE 4: norms on each sublayer's output (as OLMo 2), q and k RMS-normed per head, sliding layers with rotary
  positions and, where the model has a window, global layers without (NoPE);
* ``mistral3``: its ``text_config`` (a ``mistral`` model) is loaded from ``model.language_model.*``; the vision
  tower and projector are not (text prompts only). Its un-embedding is tied as the wrapper's flag says.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    get_bool,
    get_float,
    language_model_weights,
    rope_scaling,
    sliding_layers,
    window,
)
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.llama import convert_llama, llama_config, llama_family
from explorer.core.checkpoint.olmo import OLMO2_NAMES, olmo_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

def _flags(hf: dict[str, Any], family: str, key: str, n_layers: int) -> list[int]:
    value = hf.get(key)
    if not isinstance(value, list) or len(value) != n_layers or any(v not in (0, 1, True, False) for v in value):
        raise CheckpointError(f"{family} config.json: {key} should list 0 or 1 for each of {n_layers} layers "
                              f"(got {value!r:.60})")
    return [int(v) for v in value]


def smollm3_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "smollm3"
    base, notes = llama_config(hf, family)
    L = base.n_layers
    uses_rope = _flags(hf, family, "no_rope_layers", L) if hf.get("no_rope_layers") is not None else [
        int((i + 1) % 4 != 0) for i in range(L)]
    nope = tuple(i for i, flag in enumerate(uses_rope) if not flag)
    slide = window(hf, family) if hf.get("use_sliding_window", False) else None
    layers = sliding_layers(hf, family, L, lambda i: i in nope) if slide else ()
    cfg = dataclasses.replace(base, arch=family, nope_layers=nope, sliding_window=slide if layers else None,
                              sliding_layers=layers, attn_bias=get_bool(hf, family, "attention_bias", False),
                              mlp_bias=get_bool(hf, family, "mlp_bias", False),
                              tie_embeddings=get_bool(hf, family, "tie_word_embeddings", True))
    notes.append(f"{len(nope)} of {L} layers have no rotary positions (NoPE).")
    return cfg, notes


def _rope_by_type(hf: dict[str, Any], family: str, default_theta: float) -> tuple[float, dict, float | None]:
    """(full layers' base, their scaling, the sliding layers' base or None) from rope_parameters by layer type."""
    params = hf.get("rope_parameters") or {}
    if not (isinstance(params, dict) and "full_attention" in params):
        return float(params.get("rope_theta", hf.get("rope_theta", default_theta))), rope_scaling(hf, family), None
    full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    if rope_scaling(hf, family, local):
        raise CheckpointError(f"{family}: RoPE scaling of the sliding layers is not supported")
    return (float(full.get("rope_theta", default_theta)), rope_scaling(hf, family, full),
            float(local.get("rope_theta", full.get("rope_theta", default_theta))))


def olmo3_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "olmo3"
    base, notes = olmo_config({**hf, "rope_parameters": None, "rope_scaling": None}, "olmo2")
    theta, scaling, local = _rope_by_type(hf, family, 500000.0)
    slide = window(hf, family)
    layers = sliding_layers(hf, family, base.n_layers, lambda i: (i + 1) % 4 != 0) if slide else ()
    cfg = dataclasses.replace(base, arch=family, rotary_base=theta, rope_scaling=tuple(scaling.items()),
                              rotary_base_local=local if layers else None, sliding_window=slide if layers else None,
                              sliding_layers=layers)
    if layers:
        notes.append(f"{len(layers)} of {base.n_layers} layers attend within a sliding window of {slide} tokens"
                     + (f"; RoPE scaling ({scaling['rope_type']}) on the full layers only." if scaling else "."))
    return cfg, notes


def exaone4_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "exaone4"
    base, notes = llama_config({**hf, "sliding_window": None}, family)
    slide = window(hf, family)
    L = base.n_layers
    layers = sliding_layers(hf, family, L, lambda i: (i + 1) % 4 != 0) if slide else ()
    nope = tuple(i for i in range(L) if i not in layers) if slide else ()  # global NoPE beside sliding layers
    cfg = dataclasses.replace(base, arch=family, norm_placement="output", qk_norm="head", nope_layers=nope,
                              sliding_window=slide if layers else None, sliding_layers=layers,
                              norm_eps=get_float(hf, family, "rms_norm_eps", 1e-5))
    if layers:
        notes.append(f"{len(layers)} of {L} layers attend within a sliding window of {slide} tokens; the other "
                     f"{len(nope)} attend to every earlier token without rotary positions.")
    return cfg, notes


_VISION = ("model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.")


def mistral3_text(hf: dict[str, Any]) -> dict[str, Any]:
    text = hf.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "mistral") != "mistral":
        raise CheckpointError("mistral3 config.json: its text_config should be a mistral model "
                              f"(got {text.get('model_type') if isinstance(text, dict) else text!r:.40})")
    return {**text, "tie_word_embeddings": hf.get("tie_word_embeddings", True)}  # the wrapper's flag decides


def mistral3_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return language_model_weights(weights, _VISION)


def mistral3_config(text: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    cfg, notes = llama_config(text, "mistral")
    cfg = dataclasses.replace(cfg, arch="mistral3", tie_embeddings=get_bool(text, "mistral3", "tie_word_embeddings"))
    notes.append("Mistral Small 3 (mistral3): its language model is loaded; the vision tower and image projector "
                 "are not (text prompts only).")
    return cfg, notes


FAMILIES = (
    llama_family("smollm3", smollm3_config),
    llama_family("olmo3", olmo3_config, OLMO2_NAMES),
    llama_family("exaone4", exaone4_config, OLMO2_NAMES),  # norms on the sublayers' outputs, as OLMo 2's
    Family("mistral3", "mistral3", mistral3_config,
           lambda w, c, hf: convert_llama(mistral3_weights(w), c, "mistral3"), text_config=mistral3_text),
)
