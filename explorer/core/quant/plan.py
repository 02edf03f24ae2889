"""Before loading: what the model takes in memory each way its weights can be held, and the way that fits.

``memory_options(source, device, dtype)`` reads only headers (a GGUF file's, a directory's config.json and
safetensors headers) and returns one ``MemoryOption`` per way: ``keep`` (as stored: GGUF blocks, half
precision), ``bfloat16``/``float16`` (matrices in half precision), ``dequantize`` (every weight in the compute
precision), each with its bytes and whether it fits the machine's free memory; ``choose`` picks the first
that fits in that order of preference (``dequantize`` first where it fits, as it is the fastest; for a
quantised GGUF file ``keep`` first, as its numbers are the same and it takes a fraction of the memory).
``transformer-explorer info`` prints them; the window can offer them (``describe_options``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from explorer.core.quant.dequant import SIZES

MARGIN = 1.25  # as validate.check_fits: the weights' bytes times this, plus SPARE, must be free
SPARE = 256 * 2**20


@dataclass(frozen=True)
class MemoryOption:
    weights: str          # the load option: keep, bfloat16, float16, dequantize
    nbytes: int           # the weights' memory held this way
    fits: bool            # within the free memory, with the loader's margin
    label: str            # what it means, in words

    def line(self) -> str:
        mark = "fits" if self.fits else "does not fit"
        return f"--weights {self.weights:<10} {self.nbytes / 1e9:8.2f} GB  {mark:<12} {self.label}"


def _per_element(type_id: int) -> float:
    block, nbytes = SIZES[type_id]
    return nbytes / block


def gguf_bytes(tensors: list[Any], weights: str, compute: torch.dtype) -> int:
    """A GGUF file's weights held ``weights``-wise (matrices: 2-D and more; the rest in the compute precision)."""
    item, total = compute.itemsize, 0
    for t in tensors:
        n = t.numel
        if len(t.shape) < 2 or weights == "dequantize":
            total += n * item
        elif weights == "keep":
            total += int(n * min(_per_element(t.type_id), item))
        else:  # bfloat16 / float16 matrices
            total += n * min(2, item)
    return total


def gguf_options(tensors: list[Any], compute: torch.dtype, free: int | None) -> list[MemoryOption]:
    """A GGUF file's ways, in the order of preference: a quantised file kept first (the same numbers in a
    fraction of the memory), a float file dequantised first (the fastest)."""
    quantised = any(len(t.shape) >= 2 and _per_element(t.type_id) < 2 for t in tensors)
    order = ("keep", "bfloat16", "float16", "dequantize") if quantised else ("dequantize", "keep", "bfloat16")
    return _options({w: gguf_bytes(tensors, w, compute) for w in order}, compute, free)


def settle_gguf(ctx: Any, tensors: list[Any]) -> None:
    """``auto`` -> the first way that fits (``gguf_options``; the smallest when none does, and the load's
    memory check says so); the memory check then counts the weights as they will be held."""
    from explorer.core.checkpoint.validate import available_memory

    if ctx.weights == "auto":
        options = gguf_options(tensors, ctx.dtype, available_memory(ctx.device))
        chosen = choose(options) or min(options, key=lambda o: o.nbytes)
        ctx.weights = chosen.weights
    if ctx.weights != "dequantize":
        ctx.held_bytes = gguf_bytes(tensors, ctx.weights, ctx.dtype)


def _options(sizes: dict[str, int], compute: torch.dtype, free: int | None) -> list[MemoryOption]:
    name = str(compute).removeprefix("torch.")
    labels = {"keep": "as the file stores them, dequantised as each layer runs",
              "bfloat16": f"matrices in bfloat16, computed in {name}",
              "float16": f"matrices in float16, computed in {name}",
              "dequantize": f"every weight in {name} (the fastest)"}
    return [MemoryOption(w, n, free is None or n * MARGIN + SPARE <= free, labels[w]) for w, n in sizes.items()]


def _directory_bytes(directory: Path, compute: torch.dtype) -> tuple[int, int, int] | None:
    """(elements of matrices, their bytes as stored, elements of the rest) from the safetensors headers."""
    from explorer.core.checkpoint.safe_io import safetensors_header

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    matrices = stored = rest = 0
    for f in files:
        for e in safetensors_header(f).values():
            n = 1
            for s in e.shape:
                n *= s
            if len(e.shape) >= 2 and e.dtype.is_floating_point:
                matrices, stored = matrices + n, stored + n * min(e.dtype.itemsize, compute.itemsize)
            else:
                rest += n
    return matrices, stored, rest


def memory_options(source: str | Path, device: str = "auto", dtype: str = "float32") -> list[MemoryOption]:
    """The ways to hold this model's weights, with their bytes (see the module's description); [] when its
    files are not a GGUF file or a directory of safetensors files."""
    from explorer.core.checkpoint.gguf_validate import is_gguf, read_header
    from explorer.core.checkpoint.validate import available_memory
    from explorer.core.device import resolve_device, resolve_dtype

    dev = resolve_device(device)
    compute = resolve_dtype(dtype, dev)
    path = Path(source).expanduser()
    if not path.exists():  # a built-in model, an Ollama or LM Studio model name
        from explorer.core.checkpoint.local_stores import resolve
        from explorer.core.paths import models_dir

        local = resolve(str(source))
        path = local.path if local is not None else models_dir() / str(source)
        if not path.exists():
            return []
    free = available_memory(dev)
    if path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path)):
        return gguf_options(read_header(path).tensors, compute, free)
    # a folder, or a file of one (config.json, a safetensors shard or its index): the folder's safetensors files;
    # any other file (a .pt, a .bin) says nothing of its folder, whose other files are none of its business
    if path.is_file() and not (path.name == "config.json" or path.name.endswith((".safetensors", ".safetensors.index.json"))):
        return []
    directory = path if path.is_dir() else path.parent
    found = _directory_bytes(directory, compute) if directory.is_dir() else None
    if found is None:
        return []
    matrices, stored, rest = found
    sizes = {"dequantize": (matrices + rest) * compute.itemsize, "keep": stored + rest * compute.itemsize,
             "bfloat16": matrices * min(2, compute.itemsize) + rest * compute.itemsize}
    return _options(sizes, compute, free)


def choose(options: list[MemoryOption]) -> MemoryOption | None:
    """The first option that fits (their order is the order of preference), else None."""
    return next((o for o in options if o.fits), None)


def one_line(options: list[MemoryOption], asked: str = "auto") -> str:
    """What the window says before a load: the way the weights will be held (``asked``, or the one ``auto``
    picks) and what the others would take, e.g. "weights kept as stored: 0.70 GB; every weight in float32
    would take 5.5 GB (does not fit)". "" without options (a built-in or nanoGPT model)."""
    if not options:
        return ""
    by_way = {o.weights: o for o in options}
    chosen = by_way.get(asked) if asked != "auto" else (choose(options) or min(options, key=lambda o: o.nbytes))
    if chosen is None:
        return ""
    others = [o for o in options if o is not chosen and o.weights in ("keep", "dequantize")]
    text = f"weights {_SHORT[chosen.weights]}: {_size(chosen.nbytes)}" + ("" if chosen.fits else " (does not fit)")
    for o in others:
        text += f"; {_SHORT[o.weights]} would take {_size(o.nbytes)}" + ("" if o.fits else " (does not fit)")
    return text


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


_SHORT = {"keep": "kept as stored", "bfloat16": "in bfloat16", "float16": "in float16", "dequantize": "all expanded"}


def describe_options(options: list[MemoryOption]) -> list[str]:
    """Lines for ``info`` and the window: each way with its bytes, the chosen one marked."""
    best = choose(options)
    return [("* " if o is best else "  ") + o.line() for o in options]
