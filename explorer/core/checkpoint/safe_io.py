"""Reading checkpoint files without executing anything from them.

Weights come from safetensors files, or from pickles through ``torch.load(..., weights_only=True)``,
which refuses any pickled object that is not a tensor or a plain container. ``assign_weights``
checks every tensor by name, shape and dtype against the model before copying, and ``finish``
moves the result to the chosen device and precision. Every failure is a ``CheckpointError``.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from explorer.core.checkpoint.convert import meta_model
from explorer.core.checkpoint.pickles import check_torch_pickle
from explorer.core.checkpoint.validate import check_headers, current, read_capped, why
from explorer.core.config import ModelConfig
from explorer.core.device import resolve_device, resolve_dtype
from explorer.core.errors import CheckpointError
from explorer.core.text import shown
from explorer.core.model import Transformer, sinusoidal_positions

MAX_JSON_BYTES = 64 * 2**20  # config.json is a few kB; tokenizer.json up to tens of MB
MAX_HEADER_BYTES = 16 * 2**20  # a safetensors header: ~150 bytes per tensor (10,000 tensors: 1.5 MB)
_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from a regular file of at most ``limit`` bytes; deep nesting is refused, not a crash."""
    raw = read_capped(path, limit, "a JSON description")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{path} is nested too deeply to be a configuration") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object")
    return data


# --- safetensors ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


def safetensors_header(path: Path) -> dict[str, Entry]:
    """The tensors a safetensors file declares, each checked (dtype, shape, byte range) against the file."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path} is not a safetensors file: it has {size} bytes")
            n = struct.unpack("<Q", head)[0]
            if n > min(MAX_HEADER_BYTES, size - 8):
                raise CheckpointError(f"{path} is not a valid safetensors file: its first 8 bytes (the header "
                                      f"length) claim more than the file's {size:,} bytes or the "
                                      f"{MAX_HEADER_BYTES:,}-byte cap")  # not the number: 8 bytes of any file
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{path}: its safetensors header is nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not a valid safetensors file: its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} is not a valid safetensors file: its header is not an object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(f"{path}: its safetensors __metadata__ should map names to strings")
    base, entries = 8 + n, {}
    for name, spec in header.items():
        entries[name] = _entry(path, name, spec, base, size)
    spans = sorted((e.start, e.end, name) for name, e in entries.items() if e.end > e.start)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise CheckpointError(f"{path}: tensors {first} and {second} overlap in the file")
    return entries


def _entry(path: Path, name: str, spec: Any, base: int, size: int) -> Entry:
    bad = f"{path} is not a valid safetensors file: tensor {name!r:.80} has an invalid header"
    if not isinstance(spec, dict):
        raise CheckpointError(f"{bad} ({spec!r:.60})")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in _SAFETENSORS_DTYPES:
        raise CheckpointError(f"{bad}: dtype {dtype!r:.40} is not one of {', '.join(_SAFETENSORS_DTYPES)}")
    ints = (lambda xs: isinstance(xs, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                   for x in xs))
    if not ints(shape) or len(shape) > 8:
        raise CheckpointError(f"{bad}: shape {shape!r:.60} is not a list of at most 8 sizes")
    if not ints(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise CheckpointError(f"{bad}: data_offsets {offsets!r:.60} are not [begin, end]")
    item = _SAFETENSORS_DTYPES[dtype].itemsize
    numel = 1
    for s in shape:
        numel *= s
    span = 1
    for s in shape:  # a zero-size tensor's other sizes must still fit torch's 64-bit arithmetic
        span *= max(s, 1)
    if span >= 2**62:
        raise CheckpointError(f"{bad}: shape {tuple(shape)!s:.80} is beyond any tensor (over 2**62 elements "
                              "without its zero sizes)")
    start, end = base + offsets[0], base + offsets[1]
    if end - start != numel * item:
        raise CheckpointError(f"{bad}: shape {tuple(shape)} of {dtype} needs {numel * item:,} bytes, its byte "
                              f"range holds {end - start:,}")
    if end > size:
        raise CheckpointError(f"{path} is not a valid safetensors file: tensor {name!r} lies beyond the end of the file (byte {end:,} of {size:,}): "
                              "the file is truncated or damaged")
    return Entry(_SAFETENSORS_DTYPES[dtype], tuple(shape), start, end)


def _target(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor read from a file, in the precision being loaded (floating tensors only; a matrix kept in half
    precision stays or becomes half precision: core/quant/storage.py)."""
    from explorer.core.quant.storage import held_dtype

    ctx = current()
    if ctx is not None and tensor.is_floating_point() and tensor.dtype != (held := held_dtype(ctx, tensor)):
        return tensor.to(held)
    return tensor


def read_safetensors(path: Path, entries: dict[str, Entry] | None = None,
                     total: int | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file, read one at a time into memory of its own (no mapping of the file)."""
    if entries is None:
        entries = safetensors_header(path)
        check_headers(path, {k: e.shape for k, e in entries.items()})
    ctx = current()
    out: dict[str, torch.Tensor] = {}
    try:
        with open(path, "rb") as f:
            for name, e in sorted(entries.items(), key=lambda kv: kv[1].start):
                if ctx is not None:
                    ctx.step(total or len(entries), name)
                tensor = torch.empty(e.shape, dtype=e.dtype)
                f.seek(e.start)
                if e.end > e.start and f.readinto(tensor.view(-1).view(torch.uint8).numpy()) != e.end - e.start:
                    raise CheckpointError(f"{path}: tensor {name} is cut short: the file is truncated")
                out[name] = _target(tensor)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None
    return out


def refusal_reason(exc: Exception) -> str:
    """The informative line of torch.load's refusal (which global it met), without its advice or colours."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    advice = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line for line in lines if line and not line.startswith(advice)]
    named = [line for line in lines if "GLOBAL" in line or "global" in line]
    return ((named or lines or [type(exc).__name__])[0])[:200]


def torch_load(path: Path) -> Any:
    """``torch.load`` of a file whose pickle was checked first (``pickles.check_torch_pickle``), memory-mapped
    when the format allows, then every tensor in it checked against the storage it views."""
    check_torch_pickle(path)
    try:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            data = torch.load(path, map_location="cpu", weights_only=True)  # the legacy format cannot be mapped
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, TypeError,
            ImportError, IndexError, KeyError, NotImplementedError) as exc:
        reason = refusal_reason(exc)
        code = ", and loading it could run code" if "global" in reason.lower() else ""
        raise CheckpointError(f"refused to load {shown(path)}: it is not a plain tensor file{code} "
                              f"({shown(reason)})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None
    check_loaded_tensors(data, path)
    return data


def check_loaded_tensors(data: Any, path: Path) -> None:
    """Every tensor in what torch.load built: a dense, CPU, plain tensor lying inside its storage, whose elements
    do not overlap; and nothing but tensors, containers and primitives around them (each object visited once)."""
    seen: set[int] = set()
    stack = [(data, "")]
    while stack:
        obj, where = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, int, float, bool, type(None))):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            _check_tensor(obj, f"{path}: {where or 'a tensor'}")
        elif isinstance(obj, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(obj))
        else:
            raise CheckpointError(f"{path}: {where or 'the file'} is a {type(obj).__name__}; only tensors and "
                                  "plain containers are read from a torch file")


def _check_tensor(t: torch.Tensor, what: str) -> None:
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise CheckpointError(f"{what} is a {type(t).__name__}, not a plain tensor")
    if t.layout != torch.strided or t.is_sparse or t.is_quantized or t.is_meta or t.device.type != "cpu":
        raise CheckpointError(f"{what} is a {t.layout} tensor on {t.device} (quantized: {t.is_quantized}); only "
                              "dense CPU tensors are read")
    sizes, strides = t.shape, t.stride()
    dims = sorted((st, sz) for st, sz in zip(strides, sizes) if sz > 1)
    if any(st <= 0 for st, _ in dims):
        raise CheckpointError(f"{what} has shape {tuple(sizes)} with strides {strides}: a view that repeats its "
                              "elements is not a weight")
    span = 1
    for st, sz in dims:
        if st < span:
            raise CheckpointError(f"{what} has shape {tuple(sizes)} with strides {strides}: its elements overlap")
        span = st * sz
    needed = (t.storage_offset() + sum((sz - 1) * st for st, sz in dims) + 1) * t.element_size() if t.numel() else 0
    if needed > t.untyped_storage().nbytes():
        raise CheckpointError(f"{what} needs {needed:,} bytes but its storage holds {t.untyped_storage().nbytes():,}")


def read_torch_weights(path: Path, total: int | None = None) -> dict[str, torch.Tensor]:
    """A pickled state dict, through the checked, restricted loader only: code in the file cannot run."""
    data = torch_load(path)
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise CheckpointError(f"{path} does not hold a dictionary of tensors")
    check_headers(path, {str(k): tuple(v.shape) for k, v in data.items()})
    return convert_each(data, total)


def convert_each(data: dict[str, torch.Tensor], total: int | None = None) -> dict[str, torch.Tensor]:
    """Each tensor in the precision being loaded, one at a time (progress and cancel between tensors)."""
    ctx = current()
    out = {}
    for name in list(data):
        if ctx is not None:
            ctx.step(total or len(data), str(name))
        out[str(name)] = _owned(_target(data.pop(name)))
    return out


def _owned(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor in memory of the process's own: torch.load(mmap=True) leaves tensors viewing the file, which a
    training run re-saving it truncates (SIGBUS at the next read) or rewrites (silently other weights)."""
    if tensor.numel() and not tensor.untyped_storage().resizable():  # a file's storage (own memory is resizable)
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor


def shard_files(index: Path, suffix: str) -> tuple[dict[str, str], list[str]]:
    """(the index's weight map, its shard files), each a plain file beside the index, checked to exist."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no 'weight_map' of tensor names to shard files")
    shards = sorted({str(v) for v in weight_map.values()})
    for shard in weight_map.values():  # plain file names in the same directory only
        if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", "..") or not shard.endswith(suffix):
            raise CheckpointError(f"{index} names a shard outside its directory or of another kind: {shard!r:.80}")
    for shard in shards:
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index.name} names shard {shard}, which is missing from {index.parent}")
    return weight_map, shards


def read_sharded(index: Path, suffix: str) -> dict[str, torch.Tensor]:
    """The tensors of a sharded checkpoint: its ``*.index.json`` names the shard file of every tensor."""
    weight_map, shards = shard_files(index, suffix)
    weights: dict[str, torch.Tensor] = {}
    if suffix == ".safetensors":  # every shard's header first: the whole checkpoint is checked before reading
        headers = {shard: safetensors_header(index.parent / shard) for shard in shards}
        check_headers(index, {k: e.shape for h in headers.values() for k, e in h.items()})
        total = sum(len(h) for h in headers.values())
        for shard, entries in headers.items():
            weights.update(read_safetensors(index.parent / shard, entries, total))
    else:
        for shard in shards:
            weights.update(read_torch_weights(index.parent / shard, len(weight_map)))
    missing = [name for name in weight_map if name not in weights]
    if missing:
        raise CheckpointError(f"{index.name} lists tensors that its shards lack: {', '.join(missing[:6])}")
    return weights


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        return read_safetensors(directory / "model.safetensors")
    if (directory / "model.safetensors.index.json").is_file():
        return read_sharded(directory / "model.safetensors.index.json", ".safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return read_torch_weights(directory / "pytorch_model.bin")
    if (directory / "pytorch_model.bin.index.json").is_file():
        return read_sharded(directory / "pytorch_model.bin.index.json", ".bin")
    raise CheckpointError(f"no weights in {directory}: expected model.safetensors, pytorch_model.bin "
                          "or a sharded model.safetensors.index.json")


def _check_names(expected: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], source: str) -> None:
    missing = [k for k in expected if k not in weights]
    extra = [k for k in weights if k not in expected]
    if missing:
        raise CheckpointError(f"{source}: missing tensors: {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""))
    if extra:
        raise CheckpointError(f"{source}: unexpected tensors: {', '.join(extra[:6])}" + (" ..." if len(extra) > 6 else ""))
    from explorer.core.quant.packed import Packed

    for name, tensor in weights.items():
        if isinstance(tensor, Packed) and tuple(tensor.shape) == tuple(expected[name].shape):
            continue  # a weight kept as the file stores it (core/quant/packed.py)
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{source}: {name} is not a tensor")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(tensor.shape)}, "
                                  f"the config implies {tuple(expected[name].shape)}")
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: tensor {name} has dtype {tensor.dtype}; weights must be floating point")


def assign_weights(model: Transformer, weights: dict[str, torch.Tensor], source: str) -> None:
    """Copy ``weights`` into ``model`` after checking that the names and shapes are exactly the expected ones."""
    expected = model.state_dict()
    _check_names(expected, weights, source)
    with torch.no_grad():
        for name, param in expected.items():
            param.copy_(weights[name].to(param.dtype))


def build_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], source: str) -> Transformer:
    """A ``Transformer`` whose parameters ARE ``weights`` (checked by name, shape and dtype): it is built on the
    meta device and the tensors are assigned, so no memory is allocated or initialised twice."""
    from explorer.core.quant.packed import PackedLinear
    from explorer.core.quant.storage import split

    model = meta_model(cfg)
    _check_names(model.state_dict(), weights, source)
    weights = split(model, weights, current())  # matrices held as stored are installed as Packed modules
    dtypes = {t.dtype for t in weights.values()}
    if len(dtypes) > 1:  # one precision for the whole model
        target = torch.float32 if torch.float32 in dtypes else next(iter(dtypes))
        weights = {k: v.to(target) for k, v in weights.items()}
    model.load_state_dict(weights, strict=True, assign=True)
    if cfg.tie_embeddings and isinstance(model.unembed, PackedLinear):
        model.unembed.packed = model.embed.packed
    elif cfg.tie_embeddings:
        model.unembed.weight = model.embed.weight
    if cfg.positions == "sinusoidal":
        model.sinusoid = sinusoidal_positions(cfg.n_ctx, cfg.d_model).to(next(iter(dtypes), torch.float32))
    return model
def finish(model: Transformer, device: str, dtype: str) -> Transformer:
    dev = resolve_device(device)
    ctx = current()
    if ctx is not None and ctx.placement is not None:  # laid out across devices / offloaded (core/placement.py)
        from explorer.core.memory import release_freed_memory
        from explorer.core.placement import place

        model = model.to(dtype=resolve_dtype(dtype, dev)).eval()
        place(model, ctx.placement)
        release_freed_memory()  # the offloaded blocks' memory goes back to the OS
        return model
    return model.to(device=dev, dtype=resolve_dtype(dtype, dev)).eval()
