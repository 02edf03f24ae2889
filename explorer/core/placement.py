"""Where a model computes: one answer for a model on one device, split across devices, or offloaded.

A model opened normally sits on one device. A model bigger than the machine is *placed* with
accelerate (an optional extra: ``pip install 'transformer-explorer[offload]'``): a plan from
``infer_auto_device_map`` (a block is never split) under ``max_memory``, then ``dispatch_model``.
Blocks that do not fit go to CPU memory or to disk (one safetensors file per block, read when the
block runs); their parameters are then ``meta`` tensors and accelerate's hooks bring the weights in
for each call of the module that owns them.

So nothing asks ``next(model.parameters()).device``; everything asks here:

* ``execution_device(module)``: where a module's computation happens (its hook's execution device,
  else its first real tensor's device);
* ``block_device(model, layer)``: where block ``layer`` computes, or None for a model that is not
  placed (the forward pass then moves nothing);
* ``weights_of(module)``: a context in which ``module.weight`` is real even when offloaded (accelerate's
  ``align_module_device``), for every direct weight read (DLA, a neuron's vocabulary effect,
  neighbours, norm gains, the un-embedding);
* ``describe(model)``: "layers 0–17 cuda:0, 18–31 cpu" for the status bar and ``info``.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from explorer.core.errors import ArgumentError, ExplorerError
from explorer.core.offload_dir import checked_offload_root, offload_folder  # noqa: F401  (re-exported)
from explorer.core.text import shown

STRATEGIES = ("auto", "balanced", "sequential")
INSTALL_HINT = "placing or offloading layers needs accelerate: pip install 'transformer-explorer[offload]'"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def require_accelerate():
    """The accelerate package, or one line saying how to install it."""
    try:
        import accelerate
    except ImportError:
        raise ExplorerError(INSTALL_HINT) from None
    return accelerate


@dataclass(frozen=True)
class Placement:
    """How to lay a model out: a strategy (``auto``/``balanced``/``sequential``), memory budgets
    ({"cpu": bytes, 0: bytes, ...}, accelerate's keys) and where blocks that fit nowhere go on disk."""

    strategy: str = "auto"
    max_memory: dict[int | str, int] | None = None
    offload_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise ArgumentError(f"unknown device map {shown(repr(self.strategy), 40)}; choose one of "
                                f"{', '.join(STRATEGIES)}")
        budgets = parse_max_memory(self.max_memory) if isinstance(self.max_memory, str) else self.max_memory
        if budgets is not None:
            object.__setattr__(self, "max_memory", checked_budgets(budgets))
        if self.offload_dir is not None:
            if not isinstance(self.offload_dir, (str, os.PathLike)):
                raise ArgumentError(f"offload_dir (--offload-dir) must be a folder's path, not a "
                                    f"{type(self.offload_dir).__name__}")
            object.__setattr__(self, "offload_dir", str(checked_offload_root(self.offload_dir)))


MAX_BUDGET = 2**60  # 1 EiB: more than any machine has; a larger number is a typo


def _device_problem(key: int | str) -> str | None:
    """Why ``key`` (accelerate's key: a GPU index, "cpu" or "mps") is not a device of this machine."""
    if key == "cpu":
        return None
    if key == "mps":
        mps = getattr(torch.backends, "mps", None)
        return None if mps is not None and mps.is_available() else "this machine has no MPS device (an Apple GPU)"
    if key == "disk":
        return ("the disk takes no budget here: name a folder with --offload-dir, and what fits nowhere else goes "
                "there")
    if isinstance(key, int) and not isinstance(key, bool):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if 0 <= key < count:
            return None
        return f"this machine has no CUDA GPU {key} " + (f"(it has cuda:0 to cuda:{count - 1})" if count
                                                          else "(it has no CUDA GPU)")
    return "unknown device: use cuda:N, cpu or mps"


def checked_budgets(budgets: object) -> dict[int | str, int]:
    """``max_memory`` ({device: bytes}) checked: each device is one this machine has, each budget a whole
    number of bytes from 1 to 1 EiB. One line naming the first problem otherwise."""
    if not isinstance(budgets, dict):
        raise ArgumentError(f"max_memory (--max-memory) must be a dict of device -> bytes, or text like "
                            f"'cuda:0=20GiB,cpu=48GiB', not a {type(budgets).__name__}")
    checked: dict[int | str, int] = {}
    for key, size in budgets.items():
        name = f"cuda:{key}" if isinstance(key, int) and not isinstance(key, bool) else shown(key, 40)
        problem = _device_problem(key)
        if problem is not None:
            raise ArgumentError(f"--max-memory names {name}, but {problem}")
        try:
            if isinstance(size, bool):
                raise TypeError
            checked[key] = operator.index(size)
        except TypeError:
            checked[key] = 0
        if not 0 < checked[key] <= MAX_BUDGET:
            raise ArgumentError(f"--max-memory {name}: the budget must be a whole number of bytes from 1 to 1 EiB "
                                f"(got {shown(repr(size), 40)})")
    return checked


def parse_size(text: str, what: str = "") -> int:
    """'20GiB', '512MB', '3e9' -> bytes (at most 1 EiB); ``what`` starts the message ("--max-memory cpu: ")."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([KMGT]?I?B?)\s*", text, re.IGNORECASE)
    if not match or match.group(2).upper() not in _UNITS:
        raise ArgumentError(f"{what}cannot read the size {shown(repr(text), 60)}: write it like 20GiB, 512MB or 1000000")
    size = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not math.isfinite(size) or size > MAX_BUDGET:
        raise ArgumentError(f"{what}the size {shown(repr(text), 60)} is more than any machine has (at most 1 EiB)")
    return int(size)


def parse_max_memory(text: str | None) -> dict[int | str, int] | None:
    """'cuda:0=20GiB,cpu=48GiB' -> {0: 21474836480, 'cpu': 51539607552} (accelerate's keys)."""
    if not text:
        return None
    budgets: dict[int | str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            raise ArgumentError(f"cannot read {shown(repr(part.strip()), 60)} in --max-memory: write DEVICE=SIZE, "
                                "e.g. cuda:0=20GiB,cpu=48GiB")
        if re.fullmatch(r"(cuda:)?[0-9]+", name):
            key: int | str = int(name.split(":")[-1])
        elif name in ("cpu", "mps", "disk", "cuda"):
            key = 0 if name == "cuda" else name
        else:
            raise ArgumentError(f"unknown device {shown(repr(name), 40)} in --max-memory: use cuda:N, cpu or mps")
        budgets[key] = parse_size(size, f"--max-memory {shown(name, 40)}: ")
    return budgets


# --- where a model computes -----------------------------------------------------------------------

def _hook_device(module: torch.nn.Module) -> torch.device | None:
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):  # SequentialHook or one hook
        dev = getattr(h, "execution_device", None)
        if dev is not None:
            return torch.device(f"cuda:{dev}" if isinstance(dev, int) else dev)
    return None


def execution_device(module: torch.nn.Module) -> torch.device:
    """Where ``module`` computes: an accelerate hook's execution device, else its first tensor that is
    not on ``meta``, else the CPU."""
    for m in module.modules():
        dev = _hook_device(m)
        if dev is not None:
            return dev
        for t in [*m.parameters(recurse=False), *m.buffers(recurse=False)]:
            if t.device.type != "meta":
                return t.device
    return torch.device("cpu")


def is_placed(model: torch.nn.Module) -> bool:
    return getattr(model, "hf_device_map", None) is not None or getattr(model, "_hf_hook", None) is not None


def block_device(model: torch.nn.Module, layer: int) -> torch.device | None:
    """Where block ``layer`` computes, or None when the model was not placed (nothing to move)."""
    if not is_placed(model):
        return None
    return execution_device(model.blocks[layer])


def input_device(model: torch.nn.Module) -> torch.device:
    """Where token ids go: the embedding's device."""
    return execution_device(model.embed) if is_placed(model) else execution_device(model)


def tail_device(model: torch.nn.Module) -> torch.device:
    """Where the final norm and the un-embedding compute."""
    if not is_placed(model):
        return execution_device(model)
    return execution_device(model.ln_final if getattr(model, "ln_final", None) is not None else model.unembed)


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The model's precision (a meta parameter still has its dtype; a model whose every weight is packed: its
    floating buffers', which follow ``model.to(dtype)``)."""
    for p in model.parameters():
        return p.dtype
    for b in model.buffers():
        if b.is_floating_point():
            return b.dtype
    return torch.float32


@contextlib.contextmanager
def weights_of(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Inside, ``module``'s own parameters are real tensors on its execution device, even when offloaded."""
    hook = getattr(module, "_hf_hook", None)
    if hook is None or not getattr(hook, "offload", False):
        yield module
        return
    from accelerate.utils import align_module_device

    with align_module_device(module):
        yield module


def resident_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers that are in memory (not meta), each storage once."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.device.type == "meta" or t.untyped_storage().data_ptr() in seen:
            continue
        seen.add(t.untyped_storage().data_ptr())
        total += t.untyped_storage().nbytes()
    return total


def _ranges(layers: list[int]) -> str:
    spans, start = [], layers[0]
    for prev, cur in zip(layers, layers[1:] + [None]):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}–{prev}")
            start = cur
    return ", ".join(spans)


def describe(model: torch.nn.Module) -> str:
    """Where the layers are: 'layers 0–17 cuda:0, 18–31 cpu' (disk: 'disk'); one device: 'all layers cpu'."""
    device_map = getattr(model, "hf_device_map", None) or {}
    where: dict[str, list[int]] = {}
    for layer in range(len(model.blocks)):
        place = device_map.get(f"blocks.{layer}", device_map.get("blocks", device_map.get("")))
        if place is None:
            place = str(execution_device(model.blocks[layer]))
        place = f"cuda:{place}" if isinstance(place, int) else str(place)
        where.setdefault(place, []).append(layer)
    if len(where) == 1:
        return f"all layers {next(iter(where))}"
    return "layers " + ", ".join(f"{_ranges(layers)} {place}" for place, layers in
                                 sorted(where.items(), key=lambda item: item[1][0]))


# --- placing a model --------------------------------------------------------------------------------

def fit_to_machine() -> Placement:
    """Models > Fit to this machine: blocks on the GPUs while they fit (accelerate reads the free memory),
    then CPU memory, then the app's cache folder on disk."""
    from explorer.core.paths import user_cache_dir

    folder = user_cache_dir() / "offload"  # the app's own folder: made here (a --offload-dir is never made)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return Placement("auto", None, str(folder))


def plan(model: torch.nn.Module, placement: Placement) -> dict[str, int | str]:
    """accelerate's device map for ``model`` under ``placement`` (blocks never split)."""
    require_accelerate()
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    cfg = getattr(model, "cfg", None)
    tied = bool(getattr(cfg, "tie_embeddings", False))
    if tied:  # planned untied (accelerate's planner trips over our tie), the un-embedding then joins the embedding
        import dataclasses

        with torch.device("meta"):
            model = type(model)(dataclasses.replace(cfg, tie_embeddings=False))
    max_memory = dict(placement.max_memory) if placement.max_memory else None
    if tied and max_memory:  # the untied plan counts the shared matrix twice: give the first device it back
        first = next((k for k in max_memory if k != "disk"), None)
        if first is not None:
            max_memory[first] += model.embed.weight.numel() * model.embed.weight.element_size()
    if placement.strategy != "sequential":  # auto = balanced, as transformers' device_map="auto"
        max_memory = get_balanced_memory(model, max_memory=max_memory, no_split_module_classes=["Block"])
    device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=["Block"])
    if tied and "unembed" in device_map and "embed" in device_map:
        device_map["unembed"] = device_map["embed"]
    if "disk" in device_map.values() and placement.offload_dir is None:
        raise ExplorerError("the model does not fit the memory given: name a folder for the rest with --offload-dir")
    return device_map


_SAFETENSORS_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                      torch.uint8: "U8", torch.bool: "BOOL"}


def write_offloaded(tensors: dict[str, torch.Tensor], file: Path,
                    aliases: dict[str, str] | None = None) -> dict[str, dict]:
    """``tensors`` written to one safetensors file (through a partial file, renamed when complete); accelerate's
    offload index entries for them, and for ``aliases`` (a tied name -> the name it shares a tensor with)."""
    import json
    import struct

    header, offset = {}, 0
    codes = _SAFETENSORS_CODES
    for key, v in tensors.items():
        size = v.numel() * v.element_size()
        header[key] = {"dtype": codes[v.dtype], "shape": list(v.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = file.with_suffix(".partial")
    with open(tmp, "wb") as f:  # tensor by tensor: no second copy of the block in memory (safetensors' save_file makes one)
        f.write(struct.pack("<Q", len(raw)) + raw)
        for v in tensors.values():
            if v.numel():
                f.write(v.detach().contiguous().view(-1).view(torch.uint8).numpy().data)
    tmp.replace(file)
    index = {key: {"safetensors_file": str(file), "weight_name": key, "dtype": str(v.dtype).replace("torch.", "")}
             for key, v in tensors.items()}
    for key, first in (aliases or {}).items():
        index[key] = dict(index[first])
    return index


def _offload_to_disk(model: torch.nn.Module, names: list[str], folder: Path) -> dict[str, dict]:
    """Each module in ``names`` written to its own safetensors file; accelerate's offload index for them."""
    index: dict[str, dict] = {}
    for name in names:
        module = model.get_submodule(name) if name else model
        tensors: dict[str, torch.Tensor] = {}
        first: dict[tuple, str] = {}  # a tied tensor is written once, under its first name
        aliases: dict[str, str] = {}
        for k, v in module.state_dict(keep_vars=False).items():
            key = f"{name}.{k}" if name else k
            if first.setdefault((v.data_ptr(), tuple(v.shape)), key) == key:
                tensors[key] = v
            else:
                aliases[key] = first[(v.data_ptr(), tuple(v.shape))]
        index.update(write_offloaded(tensors, folder / f"{name or 'model'}.safetensors", aliases))
    return index


def main_device(device_map: dict[str, int | str]) -> int | str:
    """Where accelerate runs what is offloaded: the first device that is not the CPU or disk, else the CPU."""
    return next((d for d in device_map.values() if d not in ("cpu", "disk")), "cpu")


def place(model: torch.nn.Module, placement: Placement) -> dict[str, int | str]:
    """Lay ``model`` out as ``placement`` says (accelerate's ``dispatch_model``); returns the device map.
    Blocks sent to disk are written to ``placement.offload_dir`` (a new subfolder, never over a user's
    files) and their parameters become meta tensors."""
    from accelerate import dispatch_model

    device_map = plan(model, placement)
    disk = [name for name, where in device_map.items() if where == "disk"]
    index = _offload_to_disk(model, disk, offload_folder(model, placement)) if disk else None
    dispatch_model(model, device_map, main_device=main_device(device_map), offload_index=index, force_hooks=True)
    model.hf_device_map = device_map
    return device_map
