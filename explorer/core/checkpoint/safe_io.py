"""Reading checkpoint files without executing anything from them.

Weights come from safetensors files, or from pickles through ``torch.load(..., weights_only=True)``,
which refuses any pickled object that is not a tensor or a plain container. ``assign_weights``
checks every tensor by name, shape and dtype against the model before copying, and ``finish``
moves the result to the chosen device and precision. Every failure is a ``CheckpointError``.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from explorer.core.device import resolve_device, resolve_dtype
from explorer.core.errors import CheckpointError
from explorer.core.model import Transformer


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing {path.name} in {path.parent}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object")
    return data


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path.name} is not a valid safetensors file ({exc})") from None


def refusal_reason(exc: Exception) -> str:
    """The informative line of torch.load's refusal (which global it met), without its advice or colours."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    advice = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line for line in lines if line and not line.startswith(advice)]
    named = [line for line in lines if "GLOBAL" in line or "global" in line]
    return ((named or lines or [type(exc).__name__])[0])[:200]


def read_torch_weights(path: Path) -> dict[str, torch.Tensor]:
    """A pickled state dict, through the restricted unpickler only: code in the file cannot run."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"refused to load {path.name}: it is not a plain tensor file, and loading it "
                              f"could run code ({refusal_reason(exc)})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} does not hold a dictionary of tensors")
    return data


def read_sharded(index: Path, read: Callable[[Path], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The tensors of a sharded checkpoint: its ``*.index.json`` names the shard file of every tensor."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index.name} has no 'weight_map' of tensor names to shard files")
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:  # plain file names in the same directory only
        if not isinstance(shard, str) or Path(shard).name != shard or shard in (".", ".."):
            raise CheckpointError(f"{index.name} names a shard outside its directory: {shard!r}")
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index.name} names shard {shard}, which is missing from {index.parent}")
        weights.update(read(index.parent / shard))
    missing = [name for name in weight_map if name not in weights]
    if missing:
        raise CheckpointError(f"{index.name} lists tensors that its shards lack: {', '.join(missing[:6])}")
    return weights


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        return read_safetensors(directory / "model.safetensors")
    if (directory / "model.safetensors.index.json").is_file():
        return read_sharded(directory / "model.safetensors.index.json", read_safetensors)
    if (directory / "pytorch_model.bin").is_file():
        return read_torch_weights(directory / "pytorch_model.bin")
    if (directory / "pytorch_model.bin.index.json").is_file():
        return read_sharded(directory / "pytorch_model.bin.index.json", read_torch_weights)
    raise CheckpointError(f"no weights in {directory}: expected model.safetensors, pytorch_model.bin "
                          "or a sharded model.safetensors.index.json")


def assign_weights(model: Transformer, weights: dict[str, torch.Tensor], source: str) -> None:
    """Copy ``weights`` into ``model`` after checking that the names and shapes are exactly the expected ones."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    extra = [k for k in weights if k not in expected]
    if missing:
        raise CheckpointError(f"{source}: missing tensors: {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""))
    if extra:
        raise CheckpointError(f"{source}: unexpected tensors: {', '.join(extra[:6])}" + (" ..." if len(extra) > 6 else ""))
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{source}: {name} is not a tensor")
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(tensor.shape)}, "
                                  f"the config implies {tuple(expected[name].shape)}")
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: tensor {name} has dtype {tensor.dtype}; weights must be floating point")
    with torch.no_grad():
        for name, param in expected.items():
            param.copy_(weights[name].to(param.dtype))


def finish(model: Transformer, device: str, dtype: str) -> Transformer:
    dev = resolve_device(device)
    return model.to(device=dev, dtype=resolve_dtype(dtype, dev)).eval()
