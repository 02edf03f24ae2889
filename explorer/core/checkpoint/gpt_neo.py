"""Hugging Face GPT-Neo checkpoints (``model_type`` ``gpt_neo``) -> our ``Transformer``.

GPT-2's block (pre-norm LayerNorm, learned positions, ``gelu_new`` FFN, tied un-embedding) with
two differences that change what the attention panels show:

* layers alternate between global attention and **local** attention (``attention_layers``, e.g.
  ``global, local, ...``): a local layer's query sees only the last ``window_size`` keys (itself
  included), which is our ``sliding_window`` on ``window_layers``, and so part of the mask;
* the scores are **not scaled**: q.k, not q.k/sqrt(d_head) (``attn_scale = 1``).

q, k and v have no bias, the output projection has one: the loader gives q, k and v zero biases.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get,
    get_int,
    positive_window,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "gpt-neo"


def attention_layers(hf: dict[str, Any], n_layers: int) -> list[str]:
    """Each layer's attention kind: ``attention_layers``, else expanded from ``attention_types``
    ([[["global", "local"], 6]] = global, local six times over)."""
    layers = hf.get("attention_layers")
    if not layers:
        layers = []
        for entry in get(hf, FAMILY, "attention_types", [[["global"], n_layers]]):
            try:
                kinds, repeat = entry
                layers += list(kinds) * int(repeat)
            except (TypeError, ValueError):
                raise CheckpointError(f"{FAMILY} config.json: attention_types entry {entry!r} is not "
                                      "[[kinds...], count]") from None
    if len(layers) != n_layers or any(kind not in ("global", "local") for kind in layers):
        raise CheckpointError(f"{FAMILY} config.json: attention layers {layers!r} should name 'global' or 'local' "
                              f"for each of the {n_layers} layers")
    return list(layers)


def gpt_neo_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d, n_heads = get_int(hf, FAMILY, "hidden_size"), get_int(hf, FAMILY, "num_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of num_heads ({n_heads})")
    n_layers = get_int(hf, FAMILY, "num_layers")
    kinds = attention_layers(hf, n_layers)
    local = tuple(i for i, kind in enumerate(kinds) if kind == "local")
    window = positive_window(hf, FAMILY, "window_size") if local else None
    notes = [(f"GPT-Neo's local layers ({', '.join(map(str, local))}) see only the last {window} tokens; "
             "its attention scores are not divided by sqrt(d_head).")] if local else []
    act = activation({"hidden_act": hf.get("activation_function", "gelu_new")}, FAMILY, "gelu_new")
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=get_int(hf, FAMILY, "max_position_embeddings", 2048),
        d_model=d, n_layers=n_layers, n_heads=n_heads, d_head=d // n_heads,
        d_ff=get_int(hf, FAMILY, "intermediate_size") if hf.get("intermediate_size") is not None else 4 * d,
        norm="layernorm", norm_placement="pre", norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        positions="learned", activation=act, attn_bias=True, mlp_bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), attn_scale=1.0,
        sliding_window=window, sliding_layers=local if window is not None else ())
    return cfg, notes


def convert_gpt_neo(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """GPT-Neo names -> ours; q, k and v get zero biases (theirs have none, the output projection has one)."""
    shapes, t = expected_shapes(cfg), Tensors(weights, FAMILY)
    out = {"embed.weight": t.take("transformer.wte.weight", shapes["embed.weight"]),
           "pos_embed.weight": t.take("transformer.wpe.weight", shapes["pos_embed.weight"])}
    names = {"ln_1": "ln1", "ln_2": "ln2", "attn.attention.out_proj": "attn.W_O", "mlp.c_fc": "mlp.W_in",
             "mlp.c_proj": "mlp.W_out"}
    for i in range(cfg.n_layers):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
        for theirs, ours in (("q_proj", "W_Q"), ("k_proj", "W_K"), ("v_proj", "W_V")):
            w = t.take(p + f"attn.attention.{theirs}.weight", shapes[q + f"attn.{ours}.weight"])
            out[q + f"attn.{ours}.weight"] = w
            out[q + f"attn.{ours}.bias"] = w.new_zeros(shapes[q + f"attn.{ours}.bias"])
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"transformer.ln_f.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


FAMILIES = (Family("gpt_neo", FAMILY, gpt_neo_config, layout_only(convert_gpt_neo)),)
