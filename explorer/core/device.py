"""Choosing where the model runs and at what precision."""

from __future__ import annotations

import torch

from explorer.core.errors import ExplorerError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16", "float16")


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA, then MPS, then the CPU; asking for an absent device is an error."""
    if name not in DEVICES:
        raise ExplorerError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    found = available_devices()
    if name == "auto":
        return torch.device("cuda" if "cuda" in found else "mps" if "mps" in found else "cpu")
    if name not in found:
        raise ExplorerError(f"device {name!r} is not available here; available: {', '.join(found)}")
    return torch.device(name)


def supported_dtypes(device: torch.device) -> list[str]:
    """The precisions the numbers are computed in: every one on accelerators; float32 and bfloat16 on the CPU,
    where float16 arithmetic is slow (float16 *weights* are offered there: ``weights="float16"``, computed in
    float32, core/quant/storage.py)."""
    return ["float32", "bfloat16"] if device.type == "cpu" else list(DTYPES)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPES:
        raise ExplorerError(f"unknown precision {name!r}; choose one of {', '.join(DTYPES)}")
    if name not in supported_dtypes(device):
        raise ExplorerError(f"computing in {name} is not offered on {device.type}; compute in float32 or bfloat16 "
                            f"there (the weights can be held in {name}: --weights {name})")
    return getattr(torch, name)


def runtime_versions() -> dict[str, str]:
    """Versions of the engine's stack and what it can run on, for Help > About and bug reports."""
    import platform
    import sys
    from importlib import metadata

    import numpy

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    cuda = torch.version.cuda
    if torch.cuda.is_available():
        gpus = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        cuda_text = f"{cuda} ({gpus})"
    else:
        cuda_text = f"{cuda}, no GPU found" if cuda else "none (a CPU-only build of torch)"
    return {
        "Transformer Explorer": version("transformer-explorer"),
        "Python": f"{sys.version.split()[0]} ({platform.python_implementation()}, {platform.system()} {platform.machine()})",
        "torch": torch.__version__,
        "CUDA": cuda_text,
        "numpy": numpy.__version__,
        "tiktoken": version("tiktoken"),
        "safetensors": version("safetensors"),
        "devices available": ", ".join(available_devices()),
    }
