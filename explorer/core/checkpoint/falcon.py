"""Hugging Face Falcon checkpoints (``model_type`` ``falcon``) -> our ``Transformer``.

Falcon-7B/40B/180B and Falcon-11B: rotary positions over the whole head, LayerNorm, a plain GELU
FFN and a **parallel** block, ``x + attn(norm(x)) + mlp(norm(x))``, with few K/V heads:

* ``multi_query`` (Falcon-7B): one K/V head shared by every query head; one ``input_layernorm``
  read by both sublayers (``shared_norm``). Fused rows: all q heads, then k, then v.
* ``new_decoder_architecture`` (Falcon-40B/180B/11B): ``num_kv_heads`` groups; the fused rows are,
  per group, its query heads then its k and its v. Two norms (``ln_attn``, ``ln_mlp``) unless
  ``num_ln_in_parallel_attn`` is 1.
* neither: per head q, k, v rows; ``parallel_attn`` false gives a sequential block with
  ``post_attention_layernorm``.

Falcon-RW (``alibi``) has no rotary positions but BLOOM's ALiBi, added to q.k *before* the
1/sqrt(d_head) scale (``alibi_before_scale``): the bias it shows is scaled with the scores.
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.bloom import split_per_head_qkv
from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_int,
    rope,
)
from explorer.core.checkpoint.family import Family
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "falcon"


def _int(hf: dict[str, Any], *keys: str, default: Any = ...) -> int:
    """The first of ``keys`` present (Falcon's configs have used several names for the same number)."""
    for key in keys:
        if hf.get(key) is not None:
            return get_int(hf, FAMILY, key)
    if default is ...:
        raise CheckpointError(f"{FAMILY} config.json lacks {keys[0]!r}")
    return default


def falcon_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d = _int(hf, "hidden_size")
    n_heads = _int(hf, "num_attention_heads", "n_head")
    n_layers = _int(hf, "num_hidden_layers", "n_layer")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    alibi = bool(hf.get("alibi", False))
    new_arch = bool(hf.get("new_decoder_architecture", False))
    parallel = bool(hf.get("parallel_attn", True))
    if new_arch and not parallel:
        raise CheckpointError("Falcon's new decoder architecture without parallel attention is not supported")
    if new_arch:
        n_kv = _int(hf, "num_kv_heads", "n_head_kv", default=n_heads)
    elif hf.get("multi_query", True):
        n_kv = 1
    else:
        n_kv = n_heads
    if n_heads % n_kv:
        raise CheckpointError(f"{FAMILY}: num_attention_heads ({n_heads}) is not a multiple of num_kv_heads ({n_kv})")
    two_norms = new_arch and (hf.get("num_ln_in_parallel_attn") or 2) == 2
    theta, _ = rope(hf, FAMILY, ("rope_theta",))
    bias = bool(hf.get("bias", False))
    act = hf.get("activation", "gelu")
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"),
        n_ctx=_int(hf, "max_position_embeddings", default=2048), d_model=d, n_layers=n_layers, n_heads=n_heads,
        d_head=d // n_heads, d_ff=_int(hf, "ffn_hidden_size", default=4 * d),
        n_kv_heads=n_kv if n_kv != n_heads else None, norm="layernorm", norm_placement="pre",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), positions="none" if alibi else "rotary", rotary_base=theta,
        activation=activation({"hidden_act": act}, FAMILY, "gelu"), parallel_residual=parallel,
        shared_norm=parallel and not two_norms, attn_bias=bias, mlp_bias=bias,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), alibi=alibi, alibi_before_scale=alibi)
    notes = [("Falcon-RW has no position embedding: ALiBi adds -slope x distance to each head's q.k before "
             "the 1/sqrt(d_head) scale; the scores shown include it.")] if alibi else []
    return cfg, notes


def split_qkv(w: torch.Tensor, cfg: ModelConfig, new_arch: bool) -> tuple[torch.Tensor, ...]:
    """Falcon's fused ``query_key_value`` rows -> W_Q, W_K, W_V rows (see the module docstring)."""
    H, Hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
    rest = w.shape[1:]
    if new_arch:  # per group: G query heads, then k, then v
        g = w.reshape(Hkv, H // Hkv + 2, dh, *rest)
        return (g[:, :-2].reshape(H * dh, *rest), g[:, -2].reshape(Hkv * dh, *rest),
                g[:, -1].reshape(Hkv * dh, *rest))
    if Hkv == 1:  # multi-query: every q head, then the one k and the one v
        return tuple(w.split([H * dh, dh, dh]))
    return split_per_head_qkv(w, H, dh)


def convert_falcon(weights: dict[str, torch.Tensor], cfg: ModelConfig, new_arch: bool) -> dict[str, torch.Tensor]:
    shapes = expected_shapes(cfg)
    t = Tensors({k.removeprefix("transformer."): v for k, v in weights.items()}, FAMILY)
    H, Hkv, dh, d = cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.d_model
    out = {"embed.weight": t.take("word_embeddings.weight", shapes["embed.weight"])}
    if cfg.shared_norm:
        norms = {"input_layernorm": "ln1"}
    elif cfg.parallel_residual:
        norms = {"ln_attn": "ln1", "ln_mlp": "ln2"}
    else:
        norms = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2"}
    names = {**norms, "self_attention.dense": "attn.W_O", "mlp.dense_h_to_4h": "mlp.W_in",
             "mlp.dense_4h_to_h": "mlp.W_out"}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blocks.{i}."
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                if q + f"{ours}.{kind}" in shapes:
                    out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
        rows = (H + 2 * Hkv) * dh
        fused = {"weight": t.take(p + "self_attention.query_key_value.weight", (rows, d))}
        if cfg.attn_bias:
            fused["bias"] = t.take(p + "self_attention.query_key_value.bias", (rows,))
        for kind, w in fused.items():
            for name, part in zip(("W_Q", "W_K", "W_V"), split_qkv(w, cfg, new_arch)):
                out[q + f"attn.{name}.{kind}"] = part
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"ln_f.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


FAMILIES = (Family("falcon", FAMILY, falcon_config,
                   lambda w, c, hf: convert_falcon(w, c, bool(hf.get("new_decoder_architecture", False)))),)
