"""Hugging Face Llama and Mistral checkpoints -> our ``Transformer``.

* Llama: pre-norm RMSNorm, rotary positions over the whole head (``rope_theta``), grouped-query
  attention (``num_key_value_heads``), SwiGLU FFN (``down(silu(gate(x)) * up(x))`` = our gated FFN,
  ``gate_proj`` -> ``W_gate``, ``up_proj`` -> ``W_in``), no biases unless ``attention_bias`` /
  ``mlp_bias``, an untied ``lm_head`` unless ``tie_word_embeddings``, ``head_dim`` if given.
* Mistral: Llama's layout without biases. Its ``sliding_window`` limits each token to the last W
  keys: every layer is a sliding layer, and the window is part of the attention mask.

RoPE scaling (``rope_scaling`` / ``rope_parameters``): ``linear``, ``dynamic``, ``llama3`` (Llama
3.1/3.2) and ``yarn`` change the rotation frequencies exactly as transformers does
(explorer/core/rope.py); other types are refused with a clear message rather than run inexactly.
Dynamic NTK scaling exists to run past the trained context, so its context is ``factor`` times it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from explorer.core.checkpoint.convert import (
    Tensors,
    activation,
    expected_shapes,
    get_bool,
    get_float,
    get_int,
    rope,
    rope_scaling,
)
from explorer.core.checkpoint.family import ConfigFn, Family
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError


WINDOWED = ("mistral", "mixtral", "qwen3_moe", "phimoe")  # an optional sliding window on every layer


def llama_config(hf: dict[str, Any], family: str = "llama") -> tuple[ModelConfig, list[str]]:
    """Llama or Mistral config.json -> (ModelConfig, notes)."""
    notes: list[str] = []
    d, n_heads = get_int(hf, family, "hidden_size"), get_int(hf, family, "num_attention_heads")
    n_kv = get_int(hf, family, "num_key_value_heads", None) if hf.get("num_key_value_heads") is not None else n_heads
    d_head = get_int(hf, family, "head_dim", None) if hf.get("head_dim") is not None else d // max(n_heads, 1)
    if hf.get("head_dim") is None and n_heads and d % n_heads:
        raise CheckpointError(f"{family}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    theta, _ = rope(hf, family, ("rope_theta",), scaled_ok=True)  # Llama's rotary always turns the whole head
    scaling = rope_scaling(hf, family)
    n_ctx = get_int(hf, family, "max_position_embeddings", 2048)
    if scaling.get("rope_type") == "dynamic":
        n_ctx = int(n_ctx * scaling["factor"])
        notes.append(f"Dynamic NTK RoPE scaling: beyond {scaling['max_position_embeddings']} tokens the rotary "
                     "frequencies depend on the sequence length, so a token's keys are rotated as they were when "
                     "it was computed (with the KV cache, as transformers does).")
    window = hf.get("sliding_window") if family in WINDOWED else None
    if hf.get("use_sliding_window", True) is False:
        window = None
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise CheckpointError(f"{family} config.json: sliding_window should be a positive integer (got {window!r})")
        if window >= n_ctx:  # a window as long as the context changes nothing
            window = None
        else:
            notes.append(f"A sliding window: each token attends to itself and the {window - 1} tokens "
                         "before it, in every layer (shown in the attention masks).")
    cfg = ModelConfig(
        arch=family, vocab_size=get_int(hf, family, "vocab_size"), n_ctx=n_ctx, d_model=d,
        n_layers=get_int(hf, family, "num_hidden_layers"), n_heads=n_heads, d_head=d_head,
        d_ff=get_int(hf, family, "intermediate_size"), n_kv_heads=n_kv if n_kv != n_heads else None,
        norm="rmsnorm", norm_placement="pre", norm_eps=get_float(hf, family, "rms_norm_eps", 1e-6),
        positions="rotary", rotary_dim=None, rotary_base=theta, rope_scaling=tuple(scaling.items()),
        activation=activation(hf, family, "silu"), gated_ffn=True, parallel_residual=False,
        attn_bias=get_bool(hf, family, "attention_bias", False) if family == "llama" else False,
        mlp_bias=get_bool(hf, family, "mlp_bias", False) if family == "llama" else False,
        tie_embeddings=get_bool(hf, family, "tie_word_embeddings", False), sliding_window=window,
        sliding_layers=tuple(range(get_int(hf, family, "num_hidden_layers"))) if window else ())
    return cfg, notes


LLAMA_NAMES = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
               "self_attn.o_proj": "attn.W_O", "mlp.gate_proj": "mlp.W_gate", "mlp.up_proj": "mlp.W_in",
               "mlp.down_proj": "mlp.W_out", "input_layernorm": "ln1", "post_attention_layernorm": "ln2",
               "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm"}


def convert_llama(weights: dict[str, torch.Tensor], cfg: ModelConfig, family: str = "llama",
                  names: dict[str, str] | None = None,
                  rest: Callable[[Tensors, dict[str, torch.Tensor]], None] | None = None) -> dict[str, torch.Tensor]:
    """``model.layers.{i}.self_attn.q_proj`` ... -> ``blocks.{i}.attn.W_Q`` ...; nn.Linear layouts agree.

    ``names`` (theirs inside a layer -> ours) serves the families with Llama's layout (Qwen, Gemma,
    OLMo, Granite, StableLM, the mixtures of experts); a tensor is taken only where our model has it (norms
    without parameters, absent biases, the dense FFN of a dense layer only). ``rest(tensors, ours)`` takes
    what the names do not (a mixture of experts' router and expert bank: checkpoint/experts.py)."""
    shapes, t = expected_shapes(cfg), Tensors(weights, family)
    out = {"embed.weight": t.take("model.embed_tokens.weight", shapes["embed.weight"])}
    names = LLAMA_NAMES if names is None else names
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                if key in shapes:
                    out[key] = t.take(f"model.layers.{i}.{theirs}.{kind}", shapes[key])
    for kind in ("weight", "bias"):
        if f"ln_final.{kind}" in shapes:
            out[f"ln_final.{kind}"] = t.take(f"model.norm.{kind}", shapes[f"ln_final.{kind}"])
    out["unembed.weight"] = t.unembedding(out, cfg, shapes)
    if rest is not None:
        rest(t, out)
    t.finish()
    return out


def llama_family(model_type: str, config: ConfigFn, names: dict[str, str] | None = None,
                 arch: str | None = None, **hooks: Any) -> Family:
    """A family with Llama's tensor layout (``names``: theirs inside a layer -> ours, Llama's by default)."""
    return Family(model_type, arch or model_type, config,
                  lambda w, c, hf: convert_llama(w, c, model_type, names), **hooks)


FAMILIES = (llama_family("llama", lambda hf: llama_config(hf, "llama")),
            llama_family("mistral", lambda hf: llama_config(hf, "mistral")))
