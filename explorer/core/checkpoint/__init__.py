"""Opening a checkpoint: a built-in name, a directory, or a file inside one.

``load_checkpoint`` dispatches on what it finds; each format lives in its own module and this
package imports them (none of them imports it):

* ``native``: the app's own format (``config.json`` with ``"format": "transformer-explorer"``);
* Hugging Face directories by ``config.json``'s ``model_type``, through ``HF_LOADERS``, built from
  each family module's ``LOADERS`` (``gpt2``, ``llama``, ``neox``, ``qwen``, ``gemma``, ``olmo``,
  ``stablelm``, ``granite``, ``phi3``, ``phi``, ``gpt_neo``, ``opt``, ``bloom``, ``falcon``, ``gptj``);
* ``nanogpt``: a nanoGPT ``ckpt.pt`` (or its out_dir);
* built-in names: ``worked-example`` and each directory under ``models/``.

``safe_io`` reads files without executing anything from them; ``convert`` holds the helpers the
family modules share. Every failure is a ``CheckpointError`` whose message the CLI and the app show.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from explorer.core import worked_example
from explorer.core.checkpoint import (
    bloom,
    falcon,
    gemma,
    gpt2,
    gpt_neo,
    gptj,
    granite,
    llama,
    nanogpt,
    neox,
    olmo,
    opt,
    phi,
    phi3,
    qwen,
    stablelm,
)
from explorer.core.checkpoint.native import NATIVE_FORMAT, load_native, save_native
from explorer.core.checkpoint.safe_io import finish, read_json
from explorer.core.errors import CheckpointError
from explorer.core.loaded import LoadedModel
from explorer.core.paths import models_dir

__all__ = ["HF_LOADERS", "LoadedModel", "builtin_names", "default_model_name", "load_checkpoint",
           "save_native", "supported_formats"]

DEFAULT_MODEL = "shakespeare"

# model_type -> loader; one line per family module
HF_LOADERS: dict[str, Callable[[Path, dict[str, Any], str, str], LoadedModel]] = {
    **gpt2.LOADERS,
    **llama.LOADERS,
    **neox.LOADERS,
    **qwen.LOADERS,
    **gemma.LOADERS,
    **olmo.LOADERS,
    **stablelm.LOADERS,
    **granite.LOADERS,
    **phi.LOADERS,
    **phi3.LOADERS,
    **gpt_neo.LOADERS,
    **opt.LOADERS,
    **bloom.LOADERS,
    **falcon.LOADERS,
    **gptj.LOADERS,
}


def builtin_names() -> list[str]:
    root = models_dir()
    found = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    return found + [worked_example.NAME]


def default_model_name() -> str:
    names = builtin_names()
    return DEFAULT_MODEL if DEFAULT_MODEL in names else names[0]


def supported_formats() -> str:
    return ("native transformer-explorer directories; Hugging Face directories with model_type "
            + ", ".join(repr(k) for k in HF_LOADERS) + "; nanoGPT ckpt.pt files"
            + f"; built-in models: {', '.join(builtin_names())}")


def load_checkpoint(source: str | Path | None = None, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load a built-in model by name, or a checkpoint directory (or a file inside one)."""
    source = default_model_name() if source is None else source
    if str(source) == worked_example.NAME:
        model, tokenizer = worked_example.build()
        return LoadedModel(finish(model, device, dtype), tokenizer, worked_example.NAME, "built-in", "worked-example")
    path = Path(source).expanduser()
    if not path.exists() and (models_dir() / str(source)).is_dir():
        path = models_dir() / str(source)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}; give a directory, a file in one, or a built-in "
                              f"name ({', '.join(builtin_names())})")
    if path.is_file() and path.suffix in nanogpt.SUFFIXES:
        return nanogpt.load_nanogpt(path, device, dtype)
    if path.is_file():
        path = path.parent
    if not (path / "config.json").exists() and (path / "ckpt.pt").is_file():  # a nanoGPT out_dir
        return nanogpt.load_nanogpt(path / "ckpt.pt", device, dtype)
    config = read_json(path / "config.json")
    if config.get("format") == NATIVE_FORMAT:
        return load_native(path, config, device, dtype)
    model_type = config.get("model_type")
    if model_type in HF_LOADERS:
        return HF_LOADERS[model_type](path, config, device, dtype)
    if model_type:
        arch = ", ".join(config.get("architectures") or []) or model_type
        raise CheckpointError(f"unsupported architecture {arch!r} (model_type {model_type!r}); supported: "
                              + supported_formats())
    raise CheckpointError(f"{path / 'config.json'} names no known format; supported: " + supported_formats())
