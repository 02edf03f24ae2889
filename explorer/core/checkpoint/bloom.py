"""Hugging Face BLOOM checkpoints (``model_type`` ``bloom``) -> our ``Transformer``.

BLOOM has no position embedding at all: positions enter through **ALiBi**, a penalty added to
every attention score, ``-m_h * (i - j)`` for a query at i and a key j, with one slope m_h per
head (a geometric sequence). So the scores the app shows are ``q.k / sqrt(d_head) + bias`` before
the mask. (transformers adds ``m_h * j``, which differs by a constant per query row: the softmax,
and so every pattern, is the same.) The token embedding is followed by a LayerNorm
(``word_embeddings_layernorm``, our ``embed_norm``); the blocks are pre-norm LayerNorm with biases,
a fused ``query_key_value`` whose rows are, per head, its q, k and v (``[H, 3, d_head]``), and a
GELU (tanh approximation) FFN. The un-embedding is tied. Weight names may or may not carry a
``transformer.`` prefix (``BloomModel`` vs ``BloomForCausalLM`` saves).
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import Tensors, expected_shapes, get_int
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "bloom"


def bloom_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d = get_int(hf, FAMILY, "hidden_size") if "hidden_size" in hf else get_int(hf, FAMILY, "n_embed")
    n_heads = get_int(hf, FAMILY, "n_head") if "n_head" in hf else get_int(hf, FAMILY, "num_attention_heads")
    n_layers = get_int(hf, FAMILY, "n_layer") if "n_layer" in hf else get_int(hf, FAMILY, "num_hidden_layers")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of n_head ({n_heads})")
    if hf.get("apply_residual_connection_post_layernorm"):
        raise CheckpointError("this BLOOM checkpoint adds the normalised input to the residual stream "
                              "(apply_residual_connection_post_layernorm), which is not supported")
    n_ctx = get_int(hf, FAMILY, "seq_length") if hf.get("seq_length") is not None else 2048
    notes = [(f"BLOOM has no position embedding: ALiBi adds -slope x distance to each head's scores. It has no "
             f"fixed context either; prompts are capped at {n_ctx} tokens, its training length.")]
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=n_ctx, d_model=d, n_layers=n_layers,
        n_heads=n_heads, d_head=d // n_heads, d_ff=4 * d, norm="layernorm", norm_placement="pre",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), positions="none", activation="gelu_tanh",
        attn_bias=True, mlp_bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        alibi=True, embed_norm=True)
    return cfg, notes


def split_per_head_qkv(w: torch.Tensor, n_heads: int, d_head: int) -> tuple[torch.Tensor, ...]:
    """A fused projection whose rows are [H, 3, d_head] (per head: q, k, v) -> W_Q, W_K, W_V rows."""
    w = w.reshape(n_heads, 3, d_head, *w.shape[1:])
    return tuple(w[:, j].reshape(n_heads * d_head, *w.shape[3:]) for j in range(3))


def convert_bloom(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """BLOOM names -> ours; ``query_key_value`` is split per head into W_Q, W_K, W_V."""
    shapes = expected_shapes(cfg)
    t = Tensors({k.removeprefix("transformer."): v for k, v in weights.items()}, FAMILY)
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    out = {"embed.weight": t.take("word_embeddings.weight", shapes["embed.weight"])}
    for kind in ("weight", "bias"):
        out[f"ln_embed.{kind}"] = t.take(f"word_embeddings_layernorm.{kind}", shapes[f"ln_embed.{kind}"])
        out[f"ln_final.{kind}"] = t.take(f"ln_f.{kind}", shapes[f"ln_final.{kind}"])
    names = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2", "self_attention.dense": "attn.W_O",
             "mlp.dense_h_to_4h": "mlp.W_in", "mlp.dense_4h_to_h": "mlp.W_out"}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"blocks.{i}."
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
        w = t.take(p + "self_attention.query_key_value.weight", (3 * H * dh, d))
        b = t.take(p + "self_attention.query_key_value.bias", (3 * H * dh,))
        for name, w_part, b_part in zip(("W_Q", "W_K", "W_V"), split_per_head_qkv(w, H, dh),
                                        split_per_head_qkv(b, H, dh)):
            out[q + f"attn.{name}.weight"], out[q + f"attn.{name}.bias"] = w_part, b_part
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


FAMILIES = (Family("bloom", FAMILY, bloom_config, layout_only(convert_bloom)),)
