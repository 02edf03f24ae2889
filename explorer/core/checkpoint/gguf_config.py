"""A GGUF file's metadata as the ``config.json`` of the Hugging Face directory it was converted from.

* ``ARCHS`` (``gguf_archs``): each GGUF ``general.architecture`` read here, with its Hugging Face
  ``model_type``, the Hugging Face tensor names of its family (mapped to GGUF names through ``gguf``'s own
  name map: ``name_map``) and what llama.cpp changed when converting (q/k rows permuted, Gemma's norms + 1);
* ``hf_config``: ``{arch}.*`` metadata -> ``config.json`` keys (``hidden_size``, ``num_hidden_layers``,
  ...), each value type-checked and named by its GGUF key when wrong, plus what the tensors imply
  (tied embeddings, biases, StableLM's parallel residual, Falcon's decoder); a mixture of experts'
  keys (experts, k, their width, routing) in ``gguf_moe``;
* tensors llama.cpp derives from the configuration, read back into it: Llama 3.1+'s ``rope_freqs``
  (the ``llama3`` RoPE scaling, checked against its rule) and Phi-3's LongRoPE factors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from explorer.core.checkpoint.gguf_archs import ARCHS, FALCON_NEW, LATER, MIXTRAL, Arch, architecture
from explorer.core.checkpoint.gguf_archs import meta as _meta
from explorer.core.checkpoint.gguf_moe import moe_config
from explorer.core.checkpoint.gguf_validate import Header, TensorInfo
from explorer.core.errors import CheckpointError

__all__ = ["ARCHS", "FALCON_NEW", "LATER", "MIXTRAL", "Arch", "architecture", "hf_config", "hf_names", "name_map"]


def _f32(header: Header, t: TensorInfo) -> np.ndarray:
    """A small F32 tensor's values (its type and shape were checked by the caller)."""
    with open(header.path, "rb") as f:
        f.seek(t.start)
        return np.frombuffer(f.read(t.end - t.start), dtype="<f4").astype(np.float64)


# {arch}.<key> -> config.json key, with the kind of value it must be
_KEYS: tuple[tuple[str, str, type], ...] = (
    ("context_length", "max_position_embeddings", int), ("embedding_length", "hidden_size", int),
    ("block_count", "num_hidden_layers", int), ("feed_forward_length", "intermediate_size", int),
    ("attention.head_count", "num_attention_heads", int), ("attention.head_count_kv", "num_key_value_heads", int),
    ("attention.key_length", "head_dim", int), ("rope.freq_base", "rope_theta", float),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps", float),
    ("attention.layer_norm_epsilon", "layer_norm_eps", float), ("attention.sliding_window", "sliding_window", int),
    ("attn_logit_softcapping", "attn_logit_softcapping", float),
    ("final_logit_softcapping", "final_logit_softcapping", float), ("vocab_size", "vocab_size", int),
)
_GPT2_KEYS = {"max_position_embeddings": "n_positions", "hidden_size": "n_embd", "num_hidden_layers": "n_layer",
              "intermediate_size": "n_inner", "num_attention_heads": "n_head", "layer_norm_eps": "layer_norm_epsilon"}


def hf_config(header: Header) -> dict[str, Any]:
    """The ``config.json`` a Hugging Face directory of this model would hold, from the GGUF metadata."""
    arch, spec = architecture(header)
    names = {t.name for t in header.tensors}
    hf: dict[str, Any] = {"model_type": spec.model_type, **spec.extra}
    for key, hf_key, kind in _KEYS:
        value = _meta(header, f"{arch}.{key}", kind)
        if value is not None:
            hf[hf_key] = value
    if "vocab_size" not in hf:  # older files: the vocabulary's length, or the embedding's rows
        tokens = header.metadata.get("tokenizer.ggml.tokens")
        embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
        hf["vocab_size"] = len(tokens) if isinstance(tokens, list) else embd.shape[0] if embd else 0
    hf["tie_word_embeddings"] = "output.weight" not in names
    for ours, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        value = _meta(header, f"tokenizer.ggml.{key}", int)
        if value is not None:
            hf[ours] = value
    rotary = _meta(header, f"{arch}.rope.dimension_count", int)
    if spec.model_type in ("llama", "mixtral") and rotary is not None:
        hf.setdefault("head_dim", rotary)  # as transformers reads it for Llama
    scaling = _meta(header, f"{arch}.rope.scaling.type", str)
    if scaling not in (None, "none"):
        factor = _meta(header, f"{arch}.rope.scaling.factor", float)
        if scaling not in ("linear", "yarn") or factor is None:
            raise CheckpointError(f"{header.path}: RoPE scaling {scaling!r:.40} (factor {factor}) is not read from GGUF "
                                  "files (linear and yarn are)")
        hf["rope_scaling"] = {"rope_type": scaling, "factor": factor}
        original = _meta(header, f"{arch}.rope.scaling.original_context_length", int)
        if original is not None:
            hf["rope_scaling"]["original_max_position_embeddings"] = original
    if spec.model_type in ("gemma2", "gemma3_text") and hf.get("num_attention_heads"):
        # llama.cpp's rule: the 27B models scale scores by 1/sqrt(d_model / heads), the others by 1/sqrt(head_dim)
        big = hf.get("num_hidden_layers") == (46 if spec.model_type == "gemma2" else 62)
        hf["query_pre_attn_scalar"] = hf["hidden_size"] // hf["num_attention_heads"] if big else hf.get("head_dim", 256)
    if spec.model_type == "stablelm":
        heads = hf.get("num_attention_heads") or 1
        if rotary is not None and hf.get("hidden_size"):
            hf["partial_rotary_factor"] = rotary / (hf["hidden_size"] // heads)
        hf["use_qkv_bias"] = "blk.0.attn_q.bias" in names
        hf["use_parallel_residual"] = "blk.0.ffn_norm.weight" not in names
    if spec.model_type == "falcon":
        hf["layer_norm_epsilon"] = hf.pop("layer_norm_eps", 1e-5)
        hf["ffn_hidden_size"] = hf.pop("intermediate_size", None)
        hf["bias"] = "blk.0.attn_qkv.bias" in names
        kv = hf.pop("num_key_value_heads", 1)
        if hf.get("new_decoder_architecture"):
            hf["num_kv_heads"] = kv
        elif kv != 1:
            raise CheckpointError(f"{header.path}: a Falcon file of the old decoder with {kv} K/V heads "
                                  "(llama.cpp converts only multi-query ones, with 1)")
    if spec.moe:
        moe_config(header, arch, spec, hf)
    if spec.model_type == "gpt2":
        hf = {_GPT2_KEYS.get(k, k): v for k, v in hf.items()}
        hf["n_ctx"] = hf.get("n_positions")
    return hf


def name_map(arch: str, spec: Arch, n_layers: int) -> dict[str, str]:
    """GGUF tensor name (without .weight/.bias) -> the Hugging Face name, through ``gguf``'s own name map."""
    import gguf

    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    gmap = gguf.get_tensor_name_map(arch_id, n_layers)
    out: dict[str, str] = {}
    names = list(spec.top) + [spec.prefix.format(i=i) + n for i in range(n_layers) for n in spec.layer]
    for hf_name in names:
        gguf_name = gmap.get_name(hf_name)
        if gguf_name is not None:
            out.setdefault(gguf_name, hf_name)
    return out


# Llama 3.1/3.2/3.3's RoPE scaling, which llama.cpp writes as a tensor of per-frequency divisors (rope_freqs)
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
ROPE_FREQS = "rope_freqs.weight"


def llama3_divisors(head_dim: int, base: float, factor: float, low: float, high: float, context: int) -> np.ndarray:
    """The divisor of each rotary frequency under Llama 3's rule, as llama.cpp's converter computes them."""
    freqs = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / freqs
    smooth = (context / wavelen - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < context / high, 1.0, np.where(wavelen > context / low, factor, between))


def rope_from_tensor(header: Header, hf: dict[str, Any]) -> None:
    """A Llama file's ``rope_freqs`` tensor -> the ``llama3`` RoPE scaling it encodes (refused if it is not that rule)."""
    t = next((t for t in header.tensors if t.name == ROPE_FREQS), None)
    if t is None:
        return
    head_dim = hf.get("head_dim") or hf.get("hidden_size", 0) // max(hf.get("num_attention_heads", 1), 1)
    if t.type_id != 0 or t.shape != (head_dim // 2,):
        raise CheckpointError(f"{header.path}: {ROPE_FREQS} should be {head_dim // 2} F32 values "
                              f"(got {t.shape} {t.type_name})")
    divisors = _f32(header, t)
    factor = float(divisors.max())
    expected = llama3_divisors(head_dim, hf.get("rope_theta", 10000.0), factor, *LLAMA3_ROPE.values())
    if not np.isfinite(factor) or factor < 1 or not np.allclose(divisors, expected, rtol=1e-4, atol=1e-6):
        raise CheckpointError(f"{header.path}: {ROPE_FREQS} holds rotary frequency factors that are not Llama 3's "
                              "rule; they cannot be run exactly here")
    if factor > 1:
        hf["rope_scaling"] = {"rope_type": "llama3", "factor": factor, **LLAMA3_ROPE}


LONGROPE = {"rope_factors_long.weight": "long_factor", "rope_factors_short.weight": "short_factor"}
# tensors that llama.cpp writes for the configuration (RoPE frequencies), read into it rather than into the model
CONFIG_TENSORS = {"llama": (ROPE_FREQS,), "phi3": tuple(LONGROPE)}


def longrope_from_tensors(header: Header, hf: dict[str, Any]) -> None:
    """Phi-3's ``rope_factors_long``/``_short`` tensors -> its LongRoPE scaling (as its config.json has it)."""
    found = {t.name: t for t in header.tensors if t.name in LONGROPE}
    if not found:
        return
    if len(found) != 2:
        raise CheckpointError(f"{header.path}: a Phi-3 file with one of rope_factors_long and rope_factors_short")
    head_dim = hf.get("hidden_size", 0) // max(hf.get("num_attention_heads", 1), 1)
    scaling: dict[str, Any] = {"rope_type": "longrope"}
    for name, t in found.items():
        if t.type_id != 0 or t.shape != (head_dim // 2,):
            raise CheckpointError(f"{header.path}: {name} should be {head_dim // 2} F32 values "
                                  f"(got {t.shape} {t.type_name})")
        scaling[LONGROPE[name]] = [float(x) for x in _f32(header, t)]
    original = _meta(header, "phi3.rope.scaling.original_context_length", int)
    if original is None:
        raise CheckpointError(f"{header.path}: LongRoPE factors without phi3.rope.scaling.original_context_length")
    scaling["original_max_position_embeddings"] = original
    hf["rope_scaling"] = scaling


def hf_names(header: Header, arch: str, spec: Arch, n_layers: int) -> dict[str, str]:
    """Every tensor's Hugging Face name; a tensor no name maps is refused before any data is read."""
    mapping, out, unknown = name_map(arch, spec, n_layers), {}, []
    for t in header.tensors:
        if t.name in CONFIG_TENSORS.get(arch, ()):
            continue  # read into the configuration (rope_from_tensor, longrope_from_tensors)
        base, _, kind = t.name.rpartition(".")
        if kind not in ("weight", "bias") or base not in mapping:
            unknown.append(t.name)
            continue
        hf = mapping[base]
        out[t.name] = hf if kind == "weight" and spec.bare and hf.endswith(spec.bare) else f"{hf}.{kind}"
    if unknown:
        raise CheckpointError(f"{header.path}: GGUF tensors this {arch} model does not have: "
                              f"{', '.join(unknown[:6])}" + (" ..." if len(unknown) > 6 else ""))
    return out
