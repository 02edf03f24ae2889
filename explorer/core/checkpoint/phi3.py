"""Hugging Face Phi-3 / Phi-3.5 checkpoints (``model_type`` ``phi3``) -> our ``Transformer``.

Llama's block (pre-norm RMSNorm, rotary, grouped-query attention, SwiGLU FFN, no biases) with two
fused projections that are split here: ``qkv_proj`` holds the rows of q (H heads), then k and v
(Hkv heads each), and ``gate_up_proj`` the rows of the gate, then the up projection
(``down(silu(gate(x)) * up(x))``: gate -> ``W_gate``, up -> ``W_in``). A ``partial_rotary_factor``
(Phi-4-mini) rotates only the first part of each head.

``sliding_window`` (Phi-3-mini-4k: 2047 of 4096 positions) limits every query to the last W keys,
itself included: it becomes the model's local-attention window, so it is in the attention mask the
app shows. LongRoPE (``rope_scaling`` of type ``longrope``, or ``su`` in early files: Phi-3-128k,
Phi-3.5, Phi-4-mini) divides each rotary frequency by its own factor, short or long by the sequence
length, and scales cos and sin (explorer/core/rope.py computes it as transformers does).
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_int,
    positive_window,
    rope,
    rope_scaling,
    rotary_dim,
)
from explorer.core.checkpoint.family import Family, layout_only
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError

FAMILY = "phi3"


def _su_is_longrope(hf: dict[str, Any]) -> dict[str, Any]:
    """Early Phi-3-128k files call LongRoPE "su"."""
    out = dict(hf)
    for key in ("rope_scaling", "rope_parameters"):
        section = hf.get(key)
        if isinstance(section, dict) and "su" in (section.get("type"), section.get("rope_type")):
            out[key] = {**section, **({"type": "longrope"} if "type" in section else {}),
                        **({"rope_type": "longrope"} if "rope_type" in section else {})}
    return out


def phi3_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    d, n_heads = get_int(hf, FAMILY, "hidden_size"), get_int(hf, FAMILY, "num_attention_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{FAMILY}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    n_kv = get_int(hf, FAMILY, "num_key_value_heads", n_heads) if hf.get("num_key_value_heads") is not None else n_heads
    d_head = d // n_heads
    hf = _su_is_longrope(hf)
    theta, partial = rope(hf, FAMILY, ("rope_theta",), scaled_ok=True)
    scaling = rope_scaling(hf, FAMILY)
    window = positive_window(hf, FAMILY, "sliding_window")
    n_ctx = get_int(hf, FAMILY, "max_position_embeddings", 4096)
    n_layers = get_int(hf, FAMILY, "num_hidden_layers")
    notes = []
    if scaling:
        rotated = rotary_dim(d_head, partial, FAMILY) or d_head
        for key in ("short_factor", "long_factor"):
            if key in scaling and len(scaling[key]) != rotated // 2:
                raise CheckpointError(f"{FAMILY} config.json: LongRoPE's {key} has {len(scaling[key])} factors, "
                                      f"the {rotated} rotated dimensions of a head need {rotated // 2}")
        if scaling.get("rope_type") == "longrope":
            notes.append(f"LongRoPE: up to {scaling['original_max_position_embeddings']} tokens the rotary "
                         "frequencies use the short factors, beyond that the long ones (decided by the sequence "
                         "length; with the KV cache a token keeps the rotation it was computed with, as in "
                         "transformers).")
    if window is not None and window < n_ctx:
        notes.append(f"Phi-3 attends locally: each token sees at most the last {window} tokens (itself "
                     "included); the attention mask shows the window.")
    cfg = ModelConfig(
        arch=FAMILY, vocab_size=get_int(hf, FAMILY, "vocab_size"), n_ctx=n_ctx, d_model=d,
        n_layers=n_layers, n_heads=n_heads, d_head=d_head,
        d_ff=get_int(hf, FAMILY, "intermediate_size"), n_kv_heads=n_kv if n_kv != n_heads else None,
        norm="rmsnorm", norm_placement="pre", norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        positions="rotary", rotary_dim=rotary_dim(d_head, partial, FAMILY), rotary_base=theta,
        activation=activation(hf, FAMILY, "silu"), gated_ffn=True, attn_bias=False, mlp_bias=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        rope_scaling=tuple(scaling.items()),
        sliding_window=window if window is not None and window < n_ctx else None,
        sliding_layers=tuple(range(n_layers)) if window is not None and window < n_ctx else ())
    return cfg, notes


def convert_phi3(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Phi-3 names -> ours; ``qkv_proj`` rows are [q | k | v], ``gate_up_proj`` rows [gate | up]."""
    shapes, t = expected_shapes(cfg), Tensors(weights, FAMILY)
    q_rows, kv_rows, d, f = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head, cfg.d_model, cfg.d_ff
    out = {"embed.weight": t.take("model.embed_tokens.weight", shapes["embed.weight"])}
    for i in range(cfg.n_layers):
        p, q = f"model.layers.{i}.", f"blocks.{i}."
        qkv = t.take(p + "self_attn.qkv_proj.weight", (q_rows + 2 * kv_rows, d))
        out[q + "attn.W_Q.weight"], out[q + "attn.W_K.weight"], out[q + "attn.W_V.weight"] = \
            qkv.split([q_rows, kv_rows, kv_rows])
        out[q + "attn.W_O.weight"] = t.take(p + "self_attn.o_proj.weight", shapes[q + "attn.W_O.weight"])
        out[q + "mlp.W_gate.weight"], out[q + "mlp.W_in.weight"] = \
            t.take(p + "mlp.gate_up_proj.weight", (2 * f, d)).split([f, f])
        out[q + "mlp.W_out.weight"] = t.take(p + "mlp.down_proj.weight", shapes[q + "mlp.W_out.weight"])
        out[q + "ln1.weight"] = t.take(p + "input_layernorm.weight", shapes[q + "ln1.weight"])
        out[q + "ln2.weight"] = t.take(p + "post_attention_layernorm.weight", shapes[q + "ln2.weight"])
    out["ln_final.weight"] = t.take("model.norm.weight", shapes["ln_final.weight"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    t.finish()
    return out


FAMILIES = (Family("phi3", FAMILY, phi3_config, layout_only(convert_phi3)),)
