"""Hugging Face Llama, Mistral and GPT-NeoX (Pythia) checkpoints -> our ``Transformer``.

Each loader maps ``config.json`` to a ``ModelConfig`` and renames (and, for GPT-NeoX, un-fuses)
the tensors into our names; ``checkpoint.assign_weights`` then checks every name and shape again.

What each family is, in our switches:

* Llama: pre-norm RMSNorm, rotary positions over the whole head (``rope_theta``), grouped-query
  attention (``num_key_value_heads``), SwiGLU FFN (``down(silu(gate(x)) * up(x))`` = our gated FFN,
  ``gate_proj`` -> ``W_gate``, ``up_proj`` -> ``W_in``), no biases unless ``attention_bias`` /
  ``mlp_bias``, an untied ``lm_head`` unless ``tie_word_embeddings``, ``head_dim`` if given.
* Mistral: Llama's layout without biases. Its ``sliding_window`` limits each token to the last W
  keys; inside a window that is ordinary causal attention, so the context is capped at W (the
  loaded model's ``n_ctx``) and the cap is reported as a note: every result shown is then exact.
* GPT-NeoX / Pythia: pre-norm LayerNorm with biases, rotary on the first ``rotary_pct`` /
  ``partial_rotary_factor`` of each head's dimensions, a fused ``query_key_value`` whose rows are,
  per head, that head's q, k and v (``[H, 3, d_head]``), a plain GELU FFN, and the parallel
  residual ``x + attn(ln1(x)) + mlp(ln2(x))`` unless ``use_parallel_residual`` is false.

RoPE scaling variants (``rope_scaling`` / ``rope_parameters`` of a type other than ``default``:
Llama-3.1's ``llama3``, ``linear``, ``dynamic``, ``yarn``) change the rotation frequencies and are
refused with a clear message rather than run inexactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.tokenize.huggingface import tokenizer_for_checkpoint
from explorer.core.model import Transformer

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": None, "relu": "relu"}

# buffers that older checkpoints saved beside the weights; recomputed, never needed
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.bias", ".attention.masked_bias")


def _get(hf: dict[str, Any], family: str, key: str, default: Any = ...) -> Any:
    value = hf.get(key, default)
    if value is ...:
        raise CheckpointError(f"{family} config.json lacks {key!r}")
    return value


def _int(hf: dict[str, Any], family: str, key: str, default: Any = ...) -> int:
    value = _get(hf, family, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{family} config.json: {key} should be an integer (got {value!r})")
    return value


def _activation(hf: dict[str, Any], family: str, default: str) -> str:
    act = hf.get("hidden_act", default)
    if _ACTIVATIONS.get(act) is None:
        raise CheckpointError(f"{family} activation {act!r} is not supported "
                              f"({', '.join(k for k, v in _ACTIVATIONS.items() if v)} are)")
    return _ACTIVATIONS[act]


def _rope(hf: dict[str, Any], family: str, theta_keys: tuple[str, ...]) -> tuple[float, float | None]:
    """(rope theta, partial rotary factor or None), from ``rope_parameters`` (transformers 5) or the older keys."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise CheckpointError(f"{family} config.json: rope_parameters / rope_scaling should be objects")
    for section in (params, scaling):
        kind = section.get("rope_type", section.get("type", "default"))
        if kind not in (None, "default"):
            raise CheckpointError(f"{family} checkpoint uses RoPE scaling of type {kind!r}, which is not supported "
                                  "(only plain rotary positions are)")
    theta = params.get("rope_theta")
    for key in theta_keys:
        if theta is None:
            theta = hf.get(key)
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", hf.get("rotary_pct")))
    try:
        return float(10000.0 if theta is None else theta), (None if partial is None else float(partial))
    except (TypeError, ValueError):
        raise CheckpointError(f"{family} config.json: rope theta {theta!r} / rotary fraction {partial!r} "
                              "are not numbers") from None


# --- configs --------------------------------------------------------------------------------

def llama_config(hf: dict[str, Any], family: str = "llama") -> tuple[ModelConfig, list[str]]:
    """Llama or Mistral config.json -> (ModelConfig, notes)."""
    notes: list[str] = []
    d, n_heads = _int(hf, family, "hidden_size"), _int(hf, family, "num_attention_heads")
    n_kv = _int(hf, family, "num_key_value_heads", None) if hf.get("num_key_value_heads") is not None else n_heads
    d_head = _int(hf, family, "head_dim", None) if hf.get("head_dim") is not None else d // max(n_heads, 1)
    if hf.get("head_dim") is None and n_heads and d % n_heads:
        raise CheckpointError(f"{family}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    theta, _ = _rope(hf, family, ("rope_theta",))  # Llama's rotary always turns the whole head
    n_ctx = _int(hf, family, "max_position_embeddings", 2048)
    window = hf.get("sliding_window") if family == "mistral" else None
    if window is not None and (hf.get("use_sliding_window", True) is not False):
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise CheckpointError(f"{family} config.json: sliding_window should be a positive integer (got {window!r})")
        if window < n_ctx:
            notes.append(f"Mistral's sliding window ({window} tokens) is smaller than its {n_ctx}-token context: "
                         f"the context is capped at {window} tokens, within which its attention is ordinary "
                         "causal attention, so every result shown is exact.")
            n_ctx = window
    cfg = ModelConfig(
        arch=family, vocab_size=_int(hf, family, "vocab_size"), n_ctx=n_ctx, d_model=d,
        n_layers=_int(hf, family, "num_hidden_layers"), n_heads=n_heads, d_head=d_head,
        d_ff=_int(hf, family, "intermediate_size"), n_kv_heads=n_kv if n_kv != n_heads else None,
        norm="rmsnorm", norm_placement="pre", norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        positions="rotary", rotary_dim=None, rotary_base=theta,
        activation=_activation(hf, family, "silu"), gated_ffn=True, parallel_residual=False,
        attn_bias=bool(hf.get("attention_bias", False)) if family == "llama" else False,
        mlp_bias=bool(hf.get("mlp_bias", False)) if family == "llama" else False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
    return cfg, notes


def neox_config(hf: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
    family = "gpt-neox"
    d, n_heads = _int(hf, family, "hidden_size"), _int(hf, family, "num_attention_heads")
    if n_heads <= 0 or d % n_heads:
        raise CheckpointError(f"{family}: hidden_size ({d}) is not a multiple of num_attention_heads ({n_heads})")
    d_head = d // n_heads
    theta, partial = _rope(hf, family, ("rotary_emb_base", "rope_theta"))
    rotary_dim = int(d_head * (0.25 if partial is None else partial))  # transformers' default fraction
    if rotary_dim % 2 or rotary_dim > d_head or rotary_dim < 0:
        raise CheckpointError(f"{family}: the rotary part of each head ({rotary_dim} of {d_head} dimensions) "
                              "must be even and fit the head")
    cfg = ModelConfig(
        arch=family, vocab_size=_int(hf, family, "vocab_size"), n_ctx=_int(hf, family, "max_position_embeddings", 2048),
        d_model=d, n_layers=_int(hf, family, "num_hidden_layers"), n_heads=n_heads, d_head=d_head,
        d_ff=_int(hf, family, "intermediate_size"), norm="layernorm", norm_placement="pre",
        norm_eps=float(hf.get("layer_norm_eps", 1e-5)), positions="rotary" if rotary_dim else "none",
        rotary_dim=rotary_dim or None, rotary_base=theta, activation=_activation(hf, family, "gelu"),
        gated_ffn=False, parallel_residual=bool(hf.get("use_parallel_residual", True)),
        attn_bias=bool(hf.get("attention_bias", True)), mlp_bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
    return cfg, []


# --- tensors --------------------------------------------------------------------------------

class _Tensors:
    """Takes tensors out of a checkpoint by their name there, checking the shape ours will need."""

    def __init__(self, weights: dict[str, torch.Tensor], family: str) -> None:
        self.sd = {k: v for k, v in weights.items() if not k.endswith(_IGNORED_SUFFIXES)}
        self.family = family

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.sd:
            raise CheckpointError(f"{self.family} checkpoint lacks tensor {name}")
        t = self.sd.pop(name)
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{self.family} checkpoint: {name} is not a tensor")
        if tuple(t.shape) != tuple(shape):
            raise CheckpointError(f"{self.family} checkpoint: tensor {name} has shape {tuple(t.shape)}, "
                                  f"the config implies {tuple(shape)}")
        return t

    def finish(self) -> None:
        if self.sd:
            raise CheckpointError(f"{self.family} checkpoint has unexpected tensors: {', '.join(sorted(self.sd)[:6])}"
                                  + (" ..." if len(self.sd) > 6 else ""))


def _shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):  # shapes only: no memory
        return {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items()}


def convert_llama(weights: dict[str, torch.Tensor], cfg: ModelConfig, family: str = "llama") -> dict[str, torch.Tensor]:
    """``model.layers.{i}.self_attn.q_proj`` ... -> ``blocks.{i}.attn.W_Q`` ...; nn.Linear layouts agree."""
    shapes, t = _shapes(cfg), _Tensors(weights, family)
    out = {"embed.weight": t.take("model.embed_tokens.weight", shapes["embed.weight"])}
    names = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
             "self_attn.o_proj": "attn.W_O", "mlp.gate_proj": "mlp.W_gate", "mlp.up_proj": "mlp.W_in",
             "mlp.down_proj": "mlp.W_out", "input_layernorm": "ln1", "post_attention_layernorm": "ln2"}
    for i in range(cfg.n_layers):
        for theirs, ours in names.items():
            for kind in ("weight", "bias"):
                key = f"blocks.{i}.{ours}.{kind}"
                if key in shapes:
                    out[key] = t.take(f"model.layers.{i}.{theirs}.{kind}", shapes[key])
    out["ln_final.weight"] = t.take("model.norm.weight", shapes["ln_final.weight"])
    if cfg.tie_embeddings:
        t.sd.pop("lm_head.weight", None)  # some writers save the tied copy too
        out["unembed.weight"] = out["embed.weight"]
    else:
        out["unembed.weight"] = t.take("lm_head.weight", shapes["unembed.weight"])
    t.finish()
    return out


def convert_neox(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """GPT-NeoX names -> ours; ``query_key_value`` rows [H, 3, d_head] are split into W_Q, W_K, W_V."""
    shapes, t = _shapes(cfg), _Tensors(weights, "gpt-neox")
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    out = {"embed.weight": t.take("gpt_neox.embed_in.weight", shapes["embed.weight"])}
    for i in range(cfg.n_layers):
        p, q = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        for theirs, ours in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            for kind in ("weight", "bias"):
                out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
        w = t.take(p + "attention.query_key_value.weight", (3 * H * dh, d)).reshape(H, 3, dh, d)
        for j, name in enumerate(("W_Q", "W_K", "W_V")):
            out[q + f"attn.{name}.weight"] = w[:, j].reshape(H * dh, d)
        if cfg.attn_bias:
            b = t.take(p + "attention.query_key_value.bias", (3 * H * dh,)).reshape(H, 3, dh)
            for j, name in enumerate(("W_Q", "W_K", "W_V")):
                out[q + f"attn.{name}.bias"] = b[:, j].reshape(H * dh)
        for theirs, ours in (("attention.dense", "attn.W_O"), ("mlp.dense_h_to_4h", "mlp.W_in"),
                             ("mlp.dense_4h_to_h", "mlp.W_out")):
            for kind in ("weight", "bias"):
                if q + f"{ours}.{kind}" in shapes:
                    out[q + f"{ours}.{kind}"] = t.take(p + f"{theirs}.{kind}", shapes[q + f"{ours}.{kind}"])
    for kind in ("weight", "bias"):
        out[f"ln_final.{kind}"] = t.take(f"gpt_neox.final_layer_norm.{kind}", shapes[f"ln_final.{kind}"])
    head = "embed_out.weight" if "embed_out.weight" in t.sd else "lm_head.weight"  # older / newer name
    if cfg.tie_embeddings:
        t.sd.pop(head, None)
        out["unembed.weight"] = out["embed.weight"]
    else:
        out["unembed.weight"] = t.take(head, shapes["unembed.weight"])
    t.finish()
    return out


# --- loaders (registered in checkpoint.HF_LOADERS) -----------------------------------------

def _load(directory: Path, hf: dict[str, Any], device: str, dtype: str, arch: str,
          cfg: ModelConfig, notes: list[str], convert) -> Any:
    from explorer.core import checkpoint as ck

    model = Transformer(cfg)
    ck.assign_weights(model, convert(ck.read_weights(directory), cfg), str(directory))
    try:
        tokenizer, tok_notes = tokenizer_for_checkpoint(directory, cfg.vocab_size, hf.get("eos_token_id"))
    except TokenizerError as exc:
        raise CheckpointError(str(exc)) from None
    return ck.LoadedModel(ck._finish(model, device, dtype), tokenizer, directory.name, str(directory), arch,
                          notes=notes + tok_notes)


def load_hf_llama(directory: Path, hf: dict[str, Any], device: str, dtype: str) -> Any:
    cfg, notes = llama_config(hf, "llama")
    return _load(directory, hf, device, dtype, "llama", cfg, notes, lambda w, c: convert_llama(w, c, "llama"))


def load_hf_mistral(directory: Path, hf: dict[str, Any], device: str, dtype: str) -> Any:
    cfg, notes = llama_config(hf, "mistral")
    return _load(directory, hf, device, dtype, "mistral", cfg, notes, lambda w, c: convert_llama(w, c, "mistral"))


def load_hf_neox(directory: Path, hf: dict[str, Any], device: str, dtype: str) -> Any:
    cfg, notes = neox_config(hf)
    return _load(directory, hf, device, dtype, "gpt-neox", cfg, notes, convert_neox)


LOADERS = {"llama": load_hf_llama, "mistral": load_hf_mistral, "gpt_neox": load_hf_neox}
