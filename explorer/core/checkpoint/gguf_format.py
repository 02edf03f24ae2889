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
from explorer.core.checkpoint.gguf_moe import as_hf_shape, hf_shape
from explorer.core.checkpoint.gguf_validate import TYPES, Header, TensorInfo, read_header
from explorer.core.checkpoint.families import FAMILIES
from explorer.core.checkpoint.loader import configure, convert
from explorer.core.checkpoint.safe_io import build_model, finish
from explorer.core.checkpoint.validate import check_headers, current, meta_model, why
from explorer.core.errors import CheckpointError, LoadCancelled, TokenizerError
from explorer.core.loaded import LoadedModel
from explorer.core.quant.dequant import dequantize
from explorer.core.quant.packed import Packed, packable, packed_weights
from explorer.core.quant.plan import settle_gguf
from explorer.core.quant.storage import convert_packed, half_storage, identity_names

CHUNK_ELEMENTS = 16 * 2**20  # dequantised a chunk of rows at a time: 64 MB of float32 at most


# --- reading -------------------------------------------------------------------------------------

def dequantised(f: Any, t: TensorInfo, dtype: torch.dtype,
                transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """One tensor, read and dequantised (core/quant/dequant.py, equal to ``gguf``'s numpy dequantiser bit for
    bit) a chunk of rows at a time into a new tensor of ``dtype``."""
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
        raw = torch.empty((n, row_bytes), dtype=torch.uint8)
        f.seek(t.start + r0 * row_bytes)
        if f.readinto(raw.numpy()) != raw.numel():
            raise CheckpointError(f"{f.name}: tensor {t.name} is cut short: the file is truncated")
        if transform is None:
            dequantize(raw, t.type_id, dtype, out=out[r0:r0 + n])
        else:
            out[r0:r0 + n] = transform(dequantize(raw, t.type_id))
    return out.reshape(t.shape)


def _mapped(header: Header) -> np.ndarray:
    """The file's bytes, memory-mapped (copy-on-write: nothing is ever written back)."""
    try:
        return np.memmap(header.path, dtype=np.uint8, mode="c")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot map {header.path} ({exc})") from None


def row_order(t: TensorInfo, reorder: Callable[[torch.Tensor], torch.Tensor] | None) -> torch.Tensor | None:
    """The row order that undoes llama.cpp's reordering of a matrix, from the same function applied to row numbers."""
    if reorder is None:
        return None
    return reorder(torch.arange(t.shape[-2]).view(-1, 1)).view(-1)


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


def read_tensors(header: Header, hf: dict[str, Any], arch: str, spec: Arch, n_layers: int,
                 keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every tensor under its Hugging Face name: dequantised, or for the names in ``keep`` a ``Packed`` holding
    the file's blocks (memory-mapped; ``weights="keep"``) or the matrix in half precision (``bfloat16``)."""
    names = hf_names(header, arch, spec, n_layers)
    tensors = [t for t in header.tensors if t.name in names]
    check_headers(header.path, {names[t.name]: t.shape for t in tensors})
    ctx = current()
    dtype = ctx.dtype if ctx is not None else torch.float32
    half = half_storage(ctx)
    heads, kv = hf.get("num_attention_heads", 0), hf.get("num_key_value_heads") or hf.get("num_attention_heads", 0)
    out: dict[str, Any] = {}
    ordered = sorted(tensors, key=lambda t: t.start)
    mapped = _mapped(header) if keep and half is None else None
    try:
        with open(header.path, "rb") as f:
            for t in ordered:
                if ctx is not None:
                    ctx.step(len(ordered), t.name)
                reorder: Callable[[torch.Tensor], torch.Tensor] | None = None
                if spec.permuted_qk and ".attn_q." in t.name:
                    reorder = lambda w: unpermute(w, heads)  # noqa: E731
                elif spec.permuted_qk and ".attn_k." in t.name:
                    reorder = lambda w: unpermute(w, kv)  # noqa: E731
                elif spec.model_type == "falcon" and ".attn_qkv." in t.name:
                    reorder = lambda w: falcon_qkv(w, heads, hf.get("num_kv_heads", 1), spec is FALCON_NEW)  # noqa: E731
                if t.name in keep and mapped is not None:
                    _, block, nbytes = TYPES[t.type_id]
                    raw = torch.from_numpy(mapped[t.start:t.end]).view(*t.shape[:-1], t.shape[-1] // block * nbytes)
                    out[names[t.name]] = Packed(raw, t.type_id, t.shape, row_order(t, reorder))
                    continue
                minus_one = spec.norm_plus_one and t.name.endswith("norm.weight")
                held = half if t.name in keep and half is not None else dtype
                tensor = dequantised(f, t, held, (lambda v: v - 1.0) if minus_one else None)
                out[names[t.name]] = as_hf_shape(t.name, reorder(tensor) if reorder is not None else tensor)
    except OSError as exc:
        raise CheckpointError(f"cannot read {header.path} ({why(exc)})") from None
    return out


def kept(header: Header, names: dict[str, str], family: Any, hf: dict[str, Any], cfg: Any) -> frozenset[str]:
    """The file's matrices a keeping load holds packed: those the family's conversion only renames into a linear
    layer's or an embedding's weight, and (``keep``) stored in fewer bytes than the compute precision."""
    ctx = current()
    if ctx is None or ctx.weights not in ("keep", "bfloat16", "float16"):
        return frozenset()
    shapes = {names[t.name]: hf_shape(t.name, t.shape) for t in header.tensors if t.name in names}
    targets = packable(meta_model(cfg))
    renamed = identity_names(lambda w: family.convert(w, cfg, hf), shapes, targets)
    item = ctx.dtype.itemsize
    smaller = (lambda t: TYPES[t.type_id][2] / TYPES[t.type_id][1] < item) if ctx.weights == "keep" else \
        (lambda t: item > 2)
    return frozenset(t.name for t in header.tensors
                     if names.get(t.name) in renamed and len(t.shape) >= 2 and smaller(t))


def quantisation_note(header: Header, packed: int = 0) -> str:
    counts = header.tensor_types()
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    quantised = [k for k in counts if k not in ("F32", "F16", "BF16")]
    what = "quantised" if quantised else "stored"
    held = (f"; {packed} matrices are held as stored and dequantised as each layer runs (the same numbers as "
            "dequantising them at load)") if packed else ""
    return (f"GGUF file, tensors {what} as {summary}{held}; every number shown (weights, activations, logits) "
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
    if spec.model_type in ("llama", "mixtral"):
        rope_from_tensor(header, hf)
    if spec.model_type == "phi3":
        longrope_from_tensors(header, hf)
    family = FAMILIES[spec.model_type]  # the directory loader's own record: config and weight conversion
    if ctx is not None:
        settle_gguf(ctx, header.tensors)  # how the weights are held (auto: kept when that saves memory)
    hf, cfg, notes = configure(family, hf)
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if embd is None or embd.shape != (cfg.vocab_size, cfg.d_model):
        got = "none" if embd is None else str(embd.shape)
        raise CheckpointError(f"{path}: token_embd.weight has shape {got}, the metadata implies "
                              f"{(cfg.vocab_size, cfg.d_model)}")
    keep = kept(header, hf_names(header, arch, spec, cfg.n_layers), family, hf, cfg)
    weights = read_tensors(header, hf, arch, spec, cfg.n_layers, keep)
    cfg, notes, ours = convert_packed(lambda w: convert(family, hf, cfg, notes, w), weights)
    model = build_model(cfg, ours, str(path))
    try:
        tokenizer, tok_notes = tokenizer_from_gguf(header, cfg.vocab_size)
    except TokenizerError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    label = name or str(header.metadata.get("general.name") or path.stem)[:120]
    from explorer.core.chat.template import found, template_from_gguf

    template, problem = found(template_from_gguf, header.metadata)
    return LoadedModel(finish(model, device, dtype), tokenizer, label, str(path), cfg.arch,
                       notes=[quantisation_note(header, len(packed_weights(model)))] + notes + tok_notes
                             + ([problem] if problem else []),
                       chat_template=template,
                       tensor_types=[(t.name, t.type_name) for t in header.tensors])
