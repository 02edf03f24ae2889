"""Checks that run before anything is allocated: the machine's memory, the weights' headers.

``loading(...)`` is the context every ``load_checkpoint`` call runs in. While it is active:

* the loader checks the ``ModelConfig`` it is about to build against the machine (``check_config``,
  called explicitly by each loader once the config is known): the parameter count its shapes imply,
  in the chosen precision, must fit the memory that is available (``/proc/meminfo``, the cgroup
  limit, or the GPU's free memory) with a margin;
* the weight readers (``safe_io``) compare each file's tensor headers with that configuration
  (``check_headers``) before reading any tensor data, convert each tensor to the target precision
  as it is read, report "tensor i of N" to ``progress`` and stop between tensors when ``cancel``
  says so (``LoadCancelled``).

Family modules get all of this without doing anything: the generic loader (``loader.py``) calls
``check_config`` on the config a family builds, and the readers do the rest.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from explorer.core.cancel import CancelLike, asker
from explorer.core.config import ModelConfig
from explorer.core.device import resolve_device, resolve_dtype
from explorer.core.errors import CheckpointError, LoadCancelled
from explorer.core.model import Block, MLMHead, Transformer, make_norm
from explorer.core.plan import largest_hybrid_tensor

Progress = Callable[[int, int, str], None]  # (tensors done, tensors in all, what)

MEMORY_MARGIN = 1.25  # the model's bytes times this, plus SPARE_BYTES, must be available
SPARE_BYTES = 256 * 2**20
# tensor names carry their block's index after one of these words (GPT-2 h.3., Llama layers.3., ...)
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:h|layers|layer|blocks|block)\.(\d+)\.")
_BUFFER_SUFFIXES = (".inv_freq", ".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias")


@dataclass
class LoadContext:
    source: str
    device: torch.device
    dtype: torch.dtype
    progress: Progress | None = None
    cancel: CancelLike = None
    config: ModelConfig | None = None  # the configuration this load builds (check_config)
    config_file: Path | None = None  # where that configuration was read: errors without a file name get it
    done: int = 0  # tensors read so far, across shards
    placement: Any = None  # core/placement.Placement: finish() lays the model out with accelerate
    streamed: bool = False  # a placed load read block by block, straight to each block's device (streamed.py)
    weights: str = "dequantize"  # how the weights are held (core/quant/storage.py); "auto" is settled by the loader
    held_bytes: int | None = None  # the weights' memory as they will be held, where not the config's in ``dtype``

    def cancelled(self) -> bool:
        return asker(self.cancel)()

    def step(self, total: int, what: str) -> None:
        """Called before each tensor is read: stop if cancelled, else report progress."""
        if self.cancelled():
            raise LoadCancelled(f"loading {self.source} was cancelled")
        if self.progress is not None:
            self.progress(self.done, total, what)
        self.done += 1


CONTEXT: ContextVar[LoadContext | None] = ContextVar("LOAD_CONTEXT", default=None)


def current() -> LoadContext | None:
    return CONTEXT.get()


@contextmanager
def loading(source: str, device: str = "auto", dtype: str = "float32", progress: Progress | None = None,
            cancel: CancelLike = None, placement: Any = None, weights: str = "dequantize") -> Iterator[LoadContext]:
    dev = resolve_device(device)
    ctx = LoadContext(str(source), dev, resolve_dtype(dtype, dev), progress, cancel, placement=placement,
                      weights=weights)
    token = CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        CONTEXT.reset(token)


def check_config(cfg: ModelConfig) -> None:
    """While a checkpoint loads: does the model ``cfg`` describes fit the machine? It becomes the configuration
    the weights' headers are checked against. Outside a load nothing is checked."""
    ctx = current()
    if ctx is None:
        return
    placed = ctx.placement is not None  # a placed model is read into CPU memory, then laid out ...
    if not (placed and ctx.streamed):  # ... unless it streams, block by block (streamed.py): accelerate plans it
        device = torch.device("cpu") if placed else ctx.device
        if ctx.weights == "auto":  # a checkpoint that does not fit in the compute precision keeps its half precision
            ctx.weights = "dequantize"
            if not fits(cfg, ctx.dtype, device) and ctx.dtype == torch.float32 and fits(cfg, torch.bfloat16, device):
                ctx.weights = "keep"
        need = ctx.held_bytes  # a GGUF file's, from its header (quant/plan.py)
        if need is None and ctx.weights != "dequantize" and ctx.dtype.itemsize > 2:  # matrices held in half precision
            need = implied_bytes(cfg, torch.bfloat16)  # (keep: a half-precision file assumed; a float32 one stays so)
        check_fits(cfg, ctx.dtype, device, hint=not placed, need=need)
    ctx.config = cfg


# --- files ---------------------------------------------------------------------------------

def why(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return (exc.strerror or str(exc)).lower()


def read_capped(path: Path, limit: int, what: str = "this file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (a FIFO or a device is refused, never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointError(f"missing {path.name} in {path.parent}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise CheckpointError(f"{path} is {info.st_size:,} bytes; {what} should be at most {limit:,}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise CheckpointError(f"{path} is over {limit:,} bytes; {what} should be smaller")
        return data
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None
    finally:
        os.close(fd)


# --- shapes without memory -------------------------------------------------------------------

class _NoInit(TorchFunctionMode):
    """Skips the random initialisation of parameters (this thread only): on the meta device it computes nothing,
    and torch's first meta ``normal_`` alone costs seconds."""

    SKIPPED = frozenset(("normal_", "uniform_", "fill_", "zero_", "trunc_normal_", "kaiming_uniform_"))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.SKIPPED:
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **kwargs)


def meta_model(cfg: ModelConfig) -> Transformer:
    """``Transformer(cfg)`` with shapes and no memory: parameters on the meta device, never initialised."""
    with torch.device("meta"), _NoInit():
        return Transformer(cfg)


def parameter_count(cfg: ModelConfig) -> int:
    """The weights ``Transformer(cfg)`` holds (tied embeddings once), from the shapes: one block of each kind the
    per-layer plan names is built on the meta device and counted, so every architecture switch is counted as the
    model builds it."""
    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    d = cfg.d_model
    with torch.device("meta"), _NoInit():
        kinds: dict = {}
        for plan in cfg.plan:  # layers of the same plan (but their number) weigh the same
            kind = dataclasses.replace(plan, layer=0)
            if kind not in kinds:
                kinds[kind] = count(Block(cfg, plan))
        blocks = sum(kinds[dataclasses.replace(plan, layer=0)] for plan in cfg.plan)
        extra = count(make_norm(cfg, d)) if cfg.final_norm and cfg.norm != "none" else 0
        extra += count(make_norm(cfg, d)) if getattr(cfg, "embed_norm", False) else 0
        extra += count(MLMHead(cfg)) if getattr(cfg, "mlm_head", False) else 0
    extra += getattr(cfg, "token_types", 0) * d
    embeddings = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    positions = cfg.n_ctx * d if cfg.positions == "learned" else 0
    return embeddings + positions + blocks + extra


# --- memory ----------------------------------------------------------------------------------

def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read(64).strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def available_memory(device: torch.device | None = None) -> int | None:
    """Bytes that can still be allocated on ``device`` (CPU: MemAvailable, capped by a cgroup limit)."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    found = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        found = min(found, max(limit - used, 0))
    return found


def implied_bytes(cfg: ModelConfig, dtype: torch.dtype) -> int:
    """Memory of the model's weights (and sinusoid table) in ``dtype``."""
    item = torch.empty((), dtype=dtype).element_size()
    extra = cfg.n_ctx * cfg.d_model if cfg.positions == "sinusoidal" else 0
    return (parameter_count(cfg) + extra) * item


def _human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(int(n))


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 1e9 else f"{n / 1e9:,.1f} GB"


FIT_HINT = ("; to run it on this machine anyway, place its layers: --device-map auto "
            "(with --max-memory and --offload-dir), or Models > Fit to this machine")


def fits(cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> bool:
    free = available_memory(device)
    return free is None or implied_bytes(cfg, dtype) * MEMORY_MARGIN + SPARE_BYTES <= free


def check_fits(cfg: ModelConfig, dtype: torch.dtype, device: torch.device, hint: bool = False,
               need: int | None = None) -> None:
    """``need``: the weights' bytes as they will be held (kept quantised, half precision), else the config's
    parameters in ``dtype``."""
    held = need is not None
    need = implied_bytes(cfg, dtype) if need is None else need
    free = available_memory(device)
    if free is not None and need * MEMORY_MARGIN + SPARE_BYTES > free:
        where = "this GPU" if device.type == "cuda" else "this machine"
        how = "as the weights are held" if held else f"in {str(dtype).removeprefix('torch.')}"
        raise CheckpointError(f"the config implies {_human(parameter_count(cfg))} parameters = {_mb(need)} {how} ("
                              f"{cfg.n_layers} layers, d_model {cfg.d_model}, "
                              f"vocabulary {cfg.vocab_size:,}); {where} has {free / 1e9:,.1f} GB available"
                              + (FIT_HINT if hint and device.type != "cpu" else ""))


# --- weights' headers against the configuration -----------------------------------------------

def check_headers(file: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Before reading: do the tensors a weights file declares fit the configuration being loaded?

    Names differ between families, so this checks what every family shares: no tensor belongs to
    a block the config does not have, no tensor is larger than the largest the config implies
    (three times it, for fused projections), and the file does not hold more than twice the model's
    weights.
    """
    ctx = current()
    if ctx is None or ctx.config is None:
        return
    cfg = ctx.config
    counts = {name: _numel(shape) for name, shape in shapes.items() if not name.endswith(_BUFFER_SUFFIXES)}
    stacks: dict[str, list[tuple[int, str]]] = {}  # the blocks of each stack (a multimodal file has several)
    for name in counts:
        match = _LAYER_INDEX.search(name)
        if match:
            stacks.setdefault(name[:match.start(1)], []).append((int(match.group(1)), name))
    if stacks:  # the stack with the most tensors is the one the config describes
        block, name = max(max(stacks.values(), key=len))
        if block >= cfg.n_layers:
            raise CheckpointError(f"{file}: tensor {name} belongs to block {block}, but the config has "
                                  f"{cfg.n_layers} layer{'s' if cfg.n_layers != 1 else ''}")
    d, ff = cfg.d_model, max(cfg.d_ff, 1)
    experts = cfg.n_experts * d * cfg.d_expert * 2  # a mixture of experts' bank, gate and up fused in one tensor
    latent = max(cfg.q_lora_rank or 0, cfg.kv_lora_rank or 0) * max(d, cfg.n_heads * 2 * cfg.d_head)  # MLA's
    largest = 3 * max(cfg.vocab_size * d, cfg.n_ctx * d, d * ff * 2, cfg.n_heads * cfg.d_head * d, experts, latent,
                      largest_hybrid_tensor(cfg))
    for name, n in counts.items():
        if n > largest:
            raise CheckpointError(f"{file}: tensor {name} has {n:,} elements, more than any tensor the config "
                                  f"implies ({largest // 3:,})")
    # twice the model (and a saved copy of tied embeddings): room for parts the model leaves out (a multimodal
    # file's vision tower), none for a file that holds a different, larger model
    allowed = 2 * (parameter_count(cfg) + cfg.vocab_size * d)
    if sum(counts.values()) > allowed + 1024:
        raise CheckpointError(f"{file} holds {_human(sum(counts.values()))} weights in {len(counts)} tensors, "
                              f"but the config implies {_human(parameter_count(cfg))} parameters "
                              f"({cfg.n_layers} layers, d_model {d}): the config does not describe these weights")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
