"""GGUF files (llama.cpp, Ollama, LM Studio) as the Hugging Face directory they were converted from.

A GGUF file is turned into what a Hugging Face directory gives, then handed to the family's own
conversion code (the same config and convert functions a directory goes through):

* **the configuration**: ``hf_config`` builds a ``config.json``-style dict (``model_type``,
  ``hidden_size``, ``num_hidden_layers``, ...) from the file's ``{arch}.*`` metadata, each value
  type-checked and named by its GGUF key when wrong;
* **the tensors**: GGUF names (``blk.3.attn_q.weight``) become Hugging Face names
  (``model.layers.3.self_attn.q_proj.weight``) through ``gguf``'s own name map, applied to the
  family's Hugging Face names; what llama.cpp changed when converting is undone: q/k rows
  un-permuted (Llama), 1 taken off the norm weights (Gemma 2/3), ``output`` as ``lm_head``;
* **the numbers**: every tensor is dequantised by ``gguf`` (numpy) a chunk of rows at a time,
  straight into its own tensor in the target precision: progress "tensor i of N", Cancel between
  tensors, resident memory about the model plus one chunk (the file is read, not mapped).

Everything in the header is checked first (``gguf_validate``), and the tensors against the
configuration (``check_headers``) before a byte of tensor data is read. The tokenizer comes from
the file's ``tokenizer.ggml.*`` (``tokenize/gguf_tokenizer``). ``gguf`` is imported only here, when
a GGUF file is opened; neither ``transformers`` nor any code from the file runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from explorer.core.checkpoint.falcon import convert_falcon, falcon_config
from explorer.core.checkpoint.in_memory import FAMILIES, Family
from explorer.core.checkpoint.phi3 import convert_phi3, phi3_config
from explorer.core.checkpoint.gguf_validate import TYPES, Header, TensorInfo, read_header
from explorer.core.checkpoint.safe_io import build_model, finish
from explorer.core.checkpoint.validate import check_headers, current, why
from explorer.core.errors import CheckpointError, LoadCancelled, TokenizerError
from explorer.core.loaded import LoadedModel

# families the in-memory table does not list (model_type -> config and convert functions)
EXTRA_FAMILIES = {"phi3": Family(phi3_config, convert_phi3)}
CHUNK_ELEMENTS = 16 * 2**20  # dequantised a chunk of rows at a time: 64 MB of float32 at most

_LLAMA_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")
_QK_NORM = ("self_attn.q_norm", "self_attn.k_norm")
_SANDWICH = ("pre_feedforward_layernorm", "post_feedforward_layernorm")
_LLAMA_TOP = ("model.embed_tokens", "model.norm", "lm_head")


@dataclass(frozen=True)
class Arch:
    """How one GGUF ``general.architecture`` maps onto a Hugging Face family."""

    model_type: str
    layer: tuple[str, ...] = _LLAMA_LAYER  # Hugging Face names inside block i (without .weight/.bias)
    top: tuple[str, ...] = _LLAMA_TOP
    prefix: str = "model.layers.{i}."
    permuted_qk: bool = False  # llama.cpp interleaved the rotary halves of q and k rows
    norm_plus_one: bool = False  # llama.cpp stored Gemma's norm weights as 1 + w
    extra: dict[str, Any] = field(default_factory=dict)  # config.json values the metadata does not carry


ARCHS: dict[str, Arch] = {
    "llama": Arch("llama", permuted_qk=True),
    "qwen2": Arch("qwen2", extra={"use_sliding_window": False}),
    "qwen3": Arch("qwen3", _LLAMA_LAYER + _QK_NORM, extra={"use_sliding_window": False}),
    "gemma2": Arch("gemma2", _LLAMA_LAYER + _SANDWICH, ("model.embed_tokens", "model.norm"), norm_plus_one=True),
    "gemma3": Arch("gemma3_text", _LLAMA_LAYER + _SANDWICH + _QK_NORM, ("model.embed_tokens", "model.norm"),
                   norm_plus_one=True),
    "phi3": Arch("phi3", ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj",
                          "input_layernorm", "post_attention_layernorm")),
    "stablelm": Arch("stablelm"),
    "falcon": Arch("falcon", ("input_layernorm", "self_attention.query_key_value", "self_attention.dense",
                              "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
                   ("transformer.word_embeddings", "transformer.ln_f", "lm_head"), "transformer.h.{i}.",
                   extra={"parallel_attn": True, "alibi": False}),
    "gpt2": Arch("gpt2", ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"),
                 ("transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"), "transformer.h.{i}.",
                 extra={"activation_function": "gelu_new"}),
}

FALCON_NEW = Arch("falcon", ("ln_attn", "ln_mlp", *ARCHS["falcon"].layer[1:]), ARCHS["falcon"].top,
                  ARCHS["falcon"].prefix, extra={**ARCHS["falcon"].extra, "new_decoder_architecture": True})

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


def _meta(header: Header, key: str, kind: type, default: Any = None) -> Any:
    value = header.metadata.get(key, default)
    if value is None:
        return None
    ok = (isinstance(value, int) and not isinstance(value, bool)) if kind is int else \
        (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)) if kind is float \
        else isinstance(value, kind)
    if not ok:
        what = "an integer" if kind is int else "a finite number" if kind is float else "text"
        raise CheckpointError(f"{header.path}: GGUF metadata {key} should be {what} (got {value!r:.60})")
    return float(value) if kind is float else value


def architecture(header: Header) -> tuple[str, Arch]:
    arch = _meta(header, "general.architecture", str)
    if arch is None:
        raise CheckpointError(f"{header.path}: the GGUF file names no general.architecture")
    if arch not in ARCHS:
        raise CheckpointError(f"{header.path}: GGUF architecture {arch!r:.60} is not supported; supported: "
                              + ", ".join(ARCHS))
    if arch == "falcon" and any(t.name == "blk.0.attn_norm_2.weight" for t in header.tensors):
        return arch, FALCON_NEW  # Falcon-40B/180B's decoder: a norm for attention and one for the MLP
    return arch, ARCHS[arch]


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
    if spec.model_type == "llama" and rotary is not None:
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
    with open(header.path, "rb") as f:
        divisors = dequantised(f, t, torch.float32).double().numpy()
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
    with open(header.path, "rb") as f:
        for name, t in found.items():
            if t.type_id != 0 or t.shape != (head_dim // 2,):
                raise CheckpointError(f"{header.path}: {name} should be {head_dim // 2} F32 values "
                                      f"(got {t.shape} {t.type_name})")
            scaling[LONGROPE[name]] = [float(x) for x in dequantised(f, t, torch.float32).double()]
    original = _meta(header, "phi3.rope.scaling.original_context_length", int)
    if original is None:
        raise CheckpointError(f"{header.path}: LongRoPE factors without phi3.rope.scaling.original_context_length")
    scaling["original_max_position_embeddings"] = original
    hf["rope_scaling"] = scaling


def _hf_names(header: Header, arch: str, spec: Arch, n_layers: int) -> dict[str, str]:
    """Every tensor's Hugging Face name; a tensor no name maps is refused before any data is read."""
    mapping, out, unknown = name_map(arch, spec, n_layers), {}, []
    for t in header.tensors:
        if t.name in CONFIG_TENSORS.get(arch, ()):
            continue  # read into the configuration (rope_from_tensor, longrope_from_tensors)
        base, _, kind = t.name.rpartition(".")
        if kind not in ("weight", "bias") or base not in mapping:
            unknown.append(t.name)
            continue
        out[t.name] = f"{mapping[base]}.{kind}"
    if unknown:
        raise CheckpointError(f"{header.path}: GGUF tensors this {arch} model does not have: "
                              f"{', '.join(unknown[:6])}" + (" ..." if len(unknown) > 6 else ""))
    return out


# --- reading -------------------------------------------------------------------------------------

def dequantised(f: Any, t: TensorInfo, dtype: torch.dtype,
                transform: Callable[[np.ndarray], np.ndarray] | None = None) -> torch.Tensor:
    """One tensor, read and dequantised a chunk of rows at a time into a new tensor of ``dtype``."""
    from gguf import GGMLQuantizationType, quants

    qtype = GGMLQuantizationType(t.type_id)
    _, block, nbytes = TYPES[t.type_id]
    cols = t.shape[-1]
    rows = t.numel // cols
    row_bytes = cols // block * nbytes
    out = torch.empty((rows, cols), dtype=dtype)
    step = max(1, CHUNK_ELEMENTS // cols)
    ctx = current()
    for r0 in range(0, rows, step):
        if r0 and ctx is not None and ctx.cancelled():  # a large tensor stops between its chunks too
            raise LoadCancelled(f"loading {ctx.source} was cancelled")
        n = min(step, rows - r0)
        raw = np.empty((n, row_bytes), dtype=np.uint8)
        f.seek(t.start + r0 * row_bytes)
        if f.readinto(raw) != raw.nbytes:
            raise CheckpointError(f"{f.name}: tensor {t.name} is cut short: the file is truncated")
        with np.errstate(all="ignore"):  # a scale of inf or NaN gives NaN weights, shown as computed
            values = quants.dequantize(raw, qtype).reshape(n, cols)
        if transform is not None:
            values = transform(values)
        out[r0:r0 + n] = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    return out.reshape(t.shape)


def unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order (each head's two rotary halves interleaved) back to Hugging Face's."""
    rows = w.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise CheckpointError(f"a q/k tensor of {rows} rows cannot be split into {heads} heads")
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape).contiguous()


def falcon_qkv(w: torch.Tensor, heads: int, kv: int, new_arch: bool) -> torch.Tensor:
    """llama.cpp's Falcon q/k/v rows (every q head, every k, every v) back in Hugging Face's order: for the new
    decoder, per K/V group its q heads then its k and v; for multi-query (one K/V head) they are the same."""
    if not new_arch or kv <= 0 or heads % kv or w.shape[0] % (heads + 2 * kv):
        return w
    dh, rest = w.shape[0] // (heads + 2 * kv), w.shape[1:]
    q, k, v = w.split([heads * dh, kv * dh, kv * dh])
    parts = [q.reshape(kv, heads // kv, dh, *rest), k.reshape(kv, 1, dh, *rest), v.reshape(kv, 1, dh, *rest)]
    return torch.cat(parts, 1).reshape(w.shape)


def read_tensors(header: Header, hf: dict[str, Any], arch: str, spec: Arch, n_layers: int) -> dict[str, torch.Tensor]:
    names = _hf_names(header, arch, spec, n_layers)
    tensors = [t for t in header.tensors if t.name in names]
    check_headers(header.path, {names[t.name]: t.shape for t in tensors})
    ctx = current()
    dtype = ctx.dtype if ctx is not None else torch.float32
    heads, kv = hf.get("num_attention_heads", 0), hf.get("num_key_value_heads") or hf.get("num_attention_heads", 0)
    out: dict[str, torch.Tensor] = {}
    ordered = sorted(tensors, key=lambda t: t.start)
    try:
        with open(header.path, "rb") as f:
            for t in ordered:
                if ctx is not None:
                    ctx.step(len(ordered), t.name)
                minus_one = spec.norm_plus_one and t.name.endswith("norm.weight")
                tensor = dequantised(f, t, dtype, (lambda v: v - 1.0) if minus_one else None)
                if spec.permuted_qk and ".attn_q." in t.name:
                    tensor = unpermute(tensor, heads)
                elif spec.permuted_qk and ".attn_k." in t.name:
                    tensor = unpermute(tensor, kv)
                elif spec.model_type == "falcon" and ".attn_qkv." in t.name:
                    tensor = falcon_qkv(tensor, heads, hf.get("num_kv_heads", 1), spec is FALCON_NEW)
                out[names[t.name]] = tensor
    except OSError as exc:
        raise CheckpointError(f"cannot read {header.path} ({why(exc)})") from None
    return out


def quantisation_note(header: Header) -> str:
    counts = header.tensor_types()
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    quantised = [k for k in counts if k not in ("F32", "F16", "BF16")]
    what = "quantised" if quantised else "stored"
    return (f"GGUF file, tensors {what} as {summary}; every number shown (weights, activations, logits) "
            "comes from the dequantised weights, not from llama.cpp's quantised arithmetic.")


def load_gguf(path: Path, device: str, dtype: str, name: str | None = None) -> LoadedModel:
    """A GGUF file as a ``LoadedModel`` (see the module's description)."""
    from explorer.core.tokenize.gguf_tokenizer import tokenizer_from_gguf

    header = read_header(path)
    ctx = current()
    if ctx is not None:
        ctx.config_file = path
    arch, spec = architecture(header)
    hf = hf_config(header)
    if spec.model_type == "llama":
        rope_from_tensor(header, hf)
    if spec.model_type == "phi3":
        longrope_from_tensors(header, hf)
    family = FAMILIES.get(spec.model_type) or EXTRA_FAMILIES.get(spec.model_type) or Family(
        falcon_config, lambda w, c: convert_falcon(w, c, bool(hf.get("new_decoder_architecture"))))
    cfg, notes = family.config(hf)
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if embd is None or embd.shape != (cfg.vocab_size, cfg.d_model):
        got = "none" if embd is None else str(embd.shape)
        raise CheckpointError(f"{path}: token_embd.weight has shape {got}, the metadata implies "
                              f"{(cfg.vocab_size, cfg.d_model)}")
    weights = read_tensors(header, hf, arch, spec, cfg.n_layers)
    model = build_model(cfg, family.convert(weights, cfg), str(path))
    try:
        tokenizer, tok_notes = tokenizer_from_gguf(header, cfg.vocab_size)
    except TokenizerError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    label = name or str(header.metadata.get("general.name") or path.stem)[:120]
    return LoadedModel(finish(model, device, dtype), tokenizer, label, str(path), cfg.arch,
                       notes=[quantisation_note(header)] + notes + tok_notes)
