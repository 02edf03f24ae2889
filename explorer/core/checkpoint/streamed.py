"""Loading a placed model tensor by tensor: each weight goes straight to its planned device or disk file.

A model laid out with accelerate (core/placement.py) may not fit in CPU memory, so it is never read
whole. The plan comes first, from the configuration alone (a meta model: ``placement.plan``, accelerate's
``infer_auto_device_map``); then the safetensors files are read one checkpoint block at a time (the
tensors whose names carry the same layer index; embeddings, final norm and head together), that
block is converted to our names and layouts, and each tensor is put on its device
(accelerate's ``set_module_tensor_to_device``) or written to the block's file in the offload folder
(accelerate's offload index) before the next block is read. Peak memory: what stays resident plus
about one block.

The family converters (``Family.convert``) take a whole state dict. A block is converted by handing
the converter that block's real tensors and, for every other name, a tensor on the ``meta`` device of
the same shape: renames, transposes and splits work on both, and only the real outputs are kept.
Nothing here runs code from a file: safetensors only (a pickled checkpoint loads the ordinary way).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from explorer.core.checkpoint.safe_io import Entry, read_safetensors, safetensors_header, shard_files
from explorer.core.checkpoint.validate import _LAYER_INDEX, check_headers, current, meta_model
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.model import Transformer, sinusoidal_positions

Convert = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def safetensors_files(directory: Path) -> dict[Path, dict[str, Entry]] | None:
    """Every safetensors file of a checkpoint directory with its checked header, or None when its weights are
    not safetensors (they then load the ordinary way)."""
    if (directory / "model.safetensors").is_file():
        files = [directory / "model.safetensors"]
        where = files[0]
    elif (directory / "model.safetensors.index.json").is_file():
        where = directory / "model.safetensors.index.json"
        weight_map, shards = shard_files(where, ".safetensors")
        files = [directory / shard for shard in shards]
    else:
        return None
    headers = {file: safetensors_header(file) for file in files}
    check_headers(where, {k: e.shape for h in headers.values() for k, e in h.items()})
    if where.name.endswith(".index.json"):
        missing = [name for name in weight_map if not any(name in h for h in headers.values())]
        if missing:
            raise CheckpointError(f"{where.name} lists tensors that its shards lack: {', '.join(missing[:6])}")
    return headers


def streams(model_dir: Path, placed: bool) -> bool:
    """Whether a load of ``model_dir`` streams: it is placed (``--device-map``) and its weights are safetensors."""
    return placed and ((model_dir / "model.safetensors").is_file()
                       or (model_dir / "model.safetensors.index.json").is_file())


def _groups(headers: dict[Path, dict[str, Entry]]) -> list[dict[Path, dict[str, Entry]]]:
    """The checkpoint's tensors by block (their names' layer index), in order; the rest (embeddings, final
    norm, head) first."""
    groups: dict[int, dict[Path, dict[str, Entry]]] = {}
    for file, entries in headers.items():
        for name, entry in entries.items():
            match = _LAYER_INDEX.search(name)
            key = int(match.group(1)) if match else -1
            groups.setdefault(key, {}).setdefault(file, {})[name] = entry
    return [groups[k] for k in sorted(groups)]


def _placeholders(headers: dict[Path, dict[str, Entry]], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {name: torch.empty(e.shape, dtype=dtype if e.dtype.is_floating_point else e.dtype, device="meta")
            for entries in headers.values() for name, e in entries.items()}


def _owner(key: str, device_map: dict[str, int | str]) -> str:
    """The module of the device map that holds tensor ``key`` (the longest matching prefix)."""
    parts = key.split(".")
    for n in range(len(parts), -1, -1):
        name = ".".join(parts[:n])
        if name in device_map:
            return name
    raise CheckpointError(f"the device map places no module holding {key}")


def load_streamed(cfg: ModelConfig, directory: Path, convert: Convert, source: str) -> Transformer:
    """A ``Transformer`` for ``cfg`` laid out as the current load's placement says, its weights read from
    ``directory``'s safetensors one block at a time and converted by ``convert`` (theirs -> ours)."""
    from accelerate import dispatch_model

    from explorer.core.memory import release_freed_memory
    from explorer.core.placement import main_device, offload_folder, plan

    ctx = current()
    dtype = ctx.dtype
    headers = safetensors_files(directory)
    if headers is None:
        raise CheckpointError(f"no safetensors weights in {directory}")
    model = meta_model(cfg).to(dtype)
    tied = bool(cfg.tie_embeddings)
    if tied:
        model.unembed.weight = model.embed.weight
    device_map = plan(model, ctx.placement)
    expected = {k: v for k, v in model.state_dict().items()}
    folder = offload_folder(model, ctx.placement) if "disk" in device_map.values() else None
    index: dict[str, dict] = {}
    placeholders = _placeholders(headers, dtype)
    total, seen = sum(len(h) for h in headers.values()), set()
    for n, group in enumerate(_groups(headers)):
        seen |= _put_block(model, _read_block(group, total, convert, placeholders), device_map, expected, folder,
                           f"-{n}", index, source)
        release_freed_memory()  # the block just placed or written goes back to the OS before the next is read
    missing = [k for k in expected if k not in seen and not (tied and k == "unembed.weight")]
    if missing:
        raise CheckpointError(f"{source}: missing tensors: {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""))
    if tied:
        model.unembed.weight = model.embed.weight
    if cfg.positions == "sinusoidal":
        where = device_map[_owner("embed.weight", device_map)]  # used where the embedding is
        where = main_device(device_map) if where == "disk" else where
        model.sinusoid = sinusoidal_positions(cfg.n_ctx, cfg.d_model).to(
            device=f"cuda:{where}" if isinstance(where, int) else where, dtype=dtype)
    dispatch_model(model, device_map, main_device=main_device(device_map), offload_index=index or None,
                   force_hooks=True)
    model.hf_device_map = device_map
    return model.eval()


def _read_block(group: dict[Path, dict[str, Entry]], total: int, convert: Convert,
                placeholders: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One checkpoint block read and converted to our names: its real tensors (the rest stay on meta)."""
    real: dict[str, torch.Tensor] = {}
    for file, entries in group.items():
        real.update(read_safetensors(file, entries, total))
    return {k: v for k, v in convert({**placeholders, **real}).items() if v.device.type != "meta"}


def _put_block(model: Transformer, ours: dict[str, torch.Tensor], device_map: dict[str, int | str],
               expected: dict[str, torch.Tensor], folder: Path | None, suffix: str, index: dict[str, dict],
               source: str) -> set[str]:
    """Each tensor of ``ours`` on its planned device, or into its module's file in ``folder`` (``index`` gains
    accelerate's entries for them); the names placed. Nothing of the block is held after it returns."""
    from accelerate.utils import set_module_tensor_to_device

    from explorer.core.placement import write_offloaded

    tied = bool(model.cfg.tie_embeddings)
    to_disk: dict[str, dict[str, torch.Tensor]] = {}
    placed = set()
    for key in list(ours):
        tensor = ours.pop(key)
        if tied and key == "unembed.weight":
            continue
        _check(key, tensor, expected, source)
        tensor = tensor.to(expected[key].dtype)
        owner = _owner(key, device_map)
        where = device_map[owner]
        if where == "disk":
            to_disk.setdefault(owner, {})[key] = tensor
        else:
            device = torch.device(f"cuda:{where}" if isinstance(where, int) else where)
            set_module_tensor_to_device(model, key, device, value=tensor, clear_cache=False)
        placed.add(key)
    for owner in list(to_disk):  # one file per module and checkpoint block
        tensors = to_disk.pop(owner)
        aliases = {"unembed.weight": "embed.weight"} if tied and "embed.weight" in tensors else None
        index.update(write_offloaded(tensors, folder / f"{owner or 'model'}{suffix}.safetensors", aliases))
    return placed


def _check(key: str, tensor: torch.Tensor, expected: dict[str, torch.Tensor], source: str) -> None:
    if key not in expected:
        raise CheckpointError(f"{source}: unexpected tensor {key}")
    if tuple(tensor.shape) != tuple(expected[key].shape):
        raise CheckpointError(f"{source}: tensor {key} has shape {tuple(tensor.shape)}, "
                              f"the config implies {tuple(expected[key].shape)}")
    if not tensor.is_floating_point():
        raise CheckpointError(f"{source}: tensor {key} has dtype {tensor.dtype}; weights must be floating point")
