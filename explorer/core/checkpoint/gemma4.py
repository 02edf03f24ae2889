"""Gemma 4 language models (``gemma4_text``; E2B, E4B, 12B, 31B) -> our ``Transformer``.

Gemma 3's block (sandwich norms, GeGLU, q/k RMS-normed per head, the embedding times sqrt(d), a final soft cap)
with, layer by layer as the per-layer plan says (core/plan.py, core/per_layer.py):

* sliding and global (full) layers as ``layer_types`` says (5:1); the global layers have their own head size and
  K/V heads (``per_layer_config``, or ``global_head_dim`` / ``num_global_key_value_heads``) and, with
  ``attention_k_eq_v``, values that are the keys' projection (before the keys' norm); every head's v is RMS-normed
  without a weight; scores are not scaled (q and k are normed);
* RoPE per kind of layer: the sliding layers turn the whole head with their base, the global ones "proportionally"
  (the first ``partial_rotary_factor`` of the frequency pairs of the whole head, the others not at all);
* KV sharing: the last ``num_kv_shared_layers`` layers compute no keys or values and read those of the last earlier
  layer of their kind (their FFN twice as wide with ``use_double_wide_mlp``);
* per-layer embeddings (``hidden_size_per_layer_input``): a second embedding table, mixed with a projection of the
  token's embedding, feeds each block a vector added through a small gated sublayer after its FFN;
* each block's output, the whole stream, times its ``layer_scalar``; RMSNorms multiply by w (not 1 + w).

Gemma 4's mixture-of-experts block (26B-A4B: experts beside the dense FFN) is refused for now, as are the
bidirectional variants.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    get_bool,
    get_int,
    language_model_weights,
    number,
    sliding_layers,
    window,
)
from explorer.core.checkpoint.family import Family
from explorer.core.checkpoint.gemma import SANDWICH_NAMES
from explorer.core.checkpoint.llama import convert_llama, llama_config
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "gemma4_text"
NAMES = {**SANDWICH_NAMES, "per_layer_input_gate": "ple.W_gate", "per_layer_projection": "ple.W_proj",
         "post_per_layer_input_norm": "ple.norm"}


def _global_shape(hf: dict[str, Any], layers: list[int]) -> tuple[int | None, int | None]:
    """(the global layers' head size, their K/V heads): ``per_layer_config`` (transformers' files) or the
    original keys."""
    per_layer = hf.get("per_layer_config")
    if isinstance(per_layer, dict) and per_layer:
        found = {(v.get("head_dim"), v.get("num_key_value_heads")) for k, v in per_layer.items()
                 if isinstance(v, dict) and str(k).isdigit()}
        if len(found) != 1 or {int(k) for k in per_layer if str(k).isdigit()} != set(layers):
            raise CheckpointError(f"{FAMILY} config.json: per_layer_config should give the global layers {layers} "
                                  f"one head size and K/V head count (got {per_layer!r:.100})")
        d_head, kv = found.pop()
        return d_head, kv
    return hf.get("global_head_dim"), hf.get("num_global_key_value_heads")


def gemma4_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    if hf.get("enable_moe_block"):
        raise CheckpointError("Gemma 4's mixture-of-experts block (26B-A4B) is not supported yet")
    if hf.get("use_bidirectional_attention") is not None:
        raise CheckpointError("Gemma 4 with bidirectional attention is not supported")
    base, notes = llama_config({**hf, "rope_parameters": None, "rope_scaling": None}, FAMILY)
    L, d = base.n_layers, base.d_model
    slide = window(hf, FAMILY)
    sliding = sliding_layers(hf, FAMILY, L, lambda i: bool((i + 1) % 6)) if slide else ()
    full = [i for i in range(L) if i not in sliding]
    global_d_head, global_kv = _global_shape(hf, full)
    params = hf.get("rope_parameters") or {}
    glob, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    if local.get("rope_type", "default") != "default" or glob.get("rope_type", "default") not in ("default",
                                                                                                  "proportional"):
        raise CheckpointError(f"{FAMILY} config.json: RoPE types {local.get('rope_type')!r}/{glob.get('rope_type')!r} "
                              "are not supported (default on the sliding layers, proportional on the global ones)")
    scaling: dict[str, Any] = {}
    if glob.get("rope_type") == "proportional":
        scaling = {"rope_type": "proportional", "proportion": float(glob.get("partial_rotary_factor", 1.0)),
                   "factor": float(glob.get("factor", 1.0))}
    kv_shared = get_int(hf, FAMILY, "num_kv_shared_layers", 0)
    d_pl = get_int(hf, FAMILY, "hidden_size_per_layer_input", 0)
    cfg = dataclasses.replace(
        base, arch="gemma4", activation=activation(hf, FAMILY, "gelu_pytorch_tanh", "hidden_activation"),
        norm_placement="sandwich", embed_scale=d ** 0.5, attn_scale=1.0, qk_norm="head", v_norm=True,
        tie_embeddings=get_bool(hf, FAMILY, "tie_word_embeddings", True),
        attn_bias=get_bool(hf, FAMILY, "attention_bias", False), mlp_bias=False,
        sliding_window=slide if sliding else None, sliding_layers=tuple(sliding),
        rotary_base=float(glob.get("rope_theta", 1_000_000.0)), rope_scaling=tuple(scaling.items()),
        rotary_base_local=float(local.get("rope_theta", 10_000.0)) if sliding else None,
        global_d_head=global_d_head if full else None, global_kv_heads=global_kv if full else None,
        attn_k_eq_v=get_bool(hf, FAMILY, "attention_k_eq_v", False), kv_shared_layers=kv_shared,
        wide_shared_ffn=get_bool(hf, FAMILY, "use_double_wide_mlp", False), d_per_layer=d_pl,
        per_layer_vocab=get_int(hf, FAMILY, "vocab_size_per_layer_input", base.vocab_size) if d_pl else 0,
        layer_scalars=True, final_softcap=number(hf, FAMILY, "final_logit_softcapping"))
    notes.append(f"{len(sliding)} of {L} layers attend within a sliding window of {slide} tokens; the global ones "
                 f"have heads of {cfg.layer(full[0]).d_head if full else base.d_head}."
                 + (f" The last {kv_shared} layers reuse earlier layers' keys and values." if kv_shared else "")
                 + (" Each block also reads a per-layer embedding." if d_pl else "")
                 + " Each block's output is scaled by its layer scalar (direct logit attribution includes it).")
    return cfg, notes


def _take_rest(t: Tensors, out: dict[str, torch.Tensor], cfg: ModelConfig) -> None:
    """The layer scalars, the per-layer embeddings' model-level tensors; a sharing layer's unused K/V tensors (some
    files keep them) are dropped, as transformers drops them."""
    for plan in cfg.plan:
        i = plan.layer
        out[f"blocks.{i}.layer_scalar"] = t.take(f"model.layers.{i}.layer_scalar", (1,))
        if plan.kv_from is not None:
            for name in ("k_proj", "v_proj", "k_norm", "v_norm"):
                for kind in ("weight", "bias"):
                    t.sd.pop(f"model.layers.{i}.self_attn.{name}.{kind}", None)
    if cfg.d_per_layer:
        L, dp = cfg.n_layers, cfg.d_per_layer
        out["ple.embed.weight"] = t.take("model.embed_tokens_per_layer.weight", (cfg.per_layer_vocab, L * dp))
        out["ple.project.weight"] = t.take("model.per_layer_model_projection.weight", (L * dp, cfg.d_model))
        out["ple.norm.weight"] = t.take("model.per_layer_projection_norm.weight", (dp,))


_OTHER = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.", "vision_tower.",
          "audio_tower.")


def text_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return language_model_weights(weights, _OTHER)


def gemma4_text(hf: dict[str, Any]) -> dict[str, Any]:
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise CheckpointError("gemma4 config.json lacks its text_config")
    return {**text, "tie_word_embeddings": hf.get("tie_word_embeddings", text.get("tie_word_embeddings", True))}


def convert_gemma4(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    return convert_llama(text_weights(weights), cfg, FAMILY, NAMES, lambda t, out: _take_rest(t, out, cfg))


FAMILIES = (Family(FAMILY, "gemma4", gemma4_config, lambda w, c, hf: convert_gemma4(w, c)),
            Family("gemma4", "gemma4", gemma4_config, lambda w, c, hf: convert_gemma4(w, c), text_config=gemma4_text))
