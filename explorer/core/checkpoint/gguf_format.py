"""GGUF files (llama.cpp, Ollama, LM Studio) as the Hugging Face directory they were converted from.

A GGUF file is turned into what a Hugging Face directory gives, then handed to the family's own
conversion code (the same config and convert functions a directory goes through):

* **the configuration**: ``gguf_config.hf_config`` builds a ``config.json``-style dict (``model_type``,
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

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from explorer.core.checkpoint.gguf_config import (
    FALCON_NEW,
    Arch,
    architecture,
    hf_config,
    hf_names,
    longrope_from_tensors,
    rope_from_tensor,
)
from explorer.core.checkpoint.gguf_validate import TYPES, Header, TensorInfo, read_header
from explorer.core.checkpoint.families import FAMILIES
from explorer.core.checkpoint.loader import configure, convert
from explorer.core.checkpoint.safe_io import build_model, finish
from explorer.core.checkpoint.validate import check_headers, current, why
from explorer.core.errors import CheckpointError, LoadCancelled, TokenizerError
from explorer.core.loaded import LoadedModel

CHUNK_ELEMENTS = 16 * 2**20  # dequantised a chunk of rows at a time: 64 MB of float32 at most


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
    names = hf_names(header, arch, spec, n_layers)
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
    family = FAMILIES[spec.model_type]  # the directory loader's own record: config and weight conversion
    hf, cfg, notes = configure(family, hf)
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if embd is None or embd.shape != (cfg.vocab_size, cfg.d_model):
        got = "none" if embd is None else str(embd.shape)
        raise CheckpointError(f"{path}: token_embd.weight has shape {got}, the metadata implies "
                              f"{(cfg.vocab_size, cfg.d_model)}")
    weights = read_tensors(header, hf, arch, spec, cfg.n_layers)
    cfg, notes, ours = convert(family, hf, cfg, notes, weights)
    model = build_model(cfg, ours, str(path))
    try:
        tokenizer, tok_notes = tokenizer_from_gguf(header, cfg.vocab_size)
    except TokenizerError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    label = name or str(header.metadata.get("general.name") or path.stem)[:120]
    from explorer.core.chat.template import found, template_from_gguf

    template, problem = found(template_from_gguf, header.metadata)
    return LoadedModel(finish(model, device, dtype), tokenizer, label, str(path), cfg.arch,
                       notes=[quantisation_note(header)] + notes + tok_notes + ([problem] if problem else []),
                       chat_template=template,
                       tensor_types=[(t.name, t.type_name) for t in header.tensors])
