"""Opening a checkpoint: a built-in name, a directory, or a file inside one.

``load_checkpoint`` dispatches on what it finds; each format lives in its own module and this
package imports them (none of them imports it):

* ``native``: the app's own format (``config.json`` with ``"format": "transformer-explorer"``);
* Hugging Face directories by ``config.json``'s ``model_type``: the family registry
  (``families.FAMILIES``, one ``Family`` record per model type, gathered from the family modules
  ``gpt2``, ``llama``, ``neox``, ``qwen``, ``gemma``, ``bert``, ``phi3``, ``phi``, ``gpt_neo``, ``opt``,
  ``bloom``, ``falcon``, ``gptj``, ...) applied by the one generic loader (``loader.load_family``);
* ``nanogpt``: a nanoGPT ``ckpt.pt`` (or its out_dir);
* built-in names: ``worked-example`` and each directory under ``models/``;
* GGUF files (``gguf_format``: llama.cpp, LM Studio; Ollama's blobs, found by model name through
  ``local_stores``), recognised by their suffix or their magic bytes;
* the Hugging Face cache (``hub_cache``): a ``models--org--name`` folder, a snapshot in one, or a
  repository id ``org/name`` resolved offline; the model is then named ``org/name``.

``safe_io`` reads files without executing anything from them; ``convert`` holds the helpers the
family modules share. Every failure is a ``CheckpointError`` whose message the CLI and the app show.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from explorer.core import worked_example
from explorer.core.cancel import CancelLike
from explorer.core.checkpoint import gguf_config, gguf_format, hub_cache, local_stores, nanogpt
from explorer.core.checkpoint.families import FAMILIES
from explorer.core.checkpoint.gguf_validate import is_gguf
from explorer.core.checkpoint.loader import load_family
from explorer.core.checkpoint.native import NATIVE_FORMAT, load_native, save_native
from explorer.core.checkpoint.safe_io import finish, read_json
from explorer.core.checkpoint.validate import Progress, loading
from explorer.core.checkpoint.validate import current as current_load
from explorer.core.errors import CheckpointError, ExplorerError, InternalError
from explorer.core.loaded import LoadedModel
from explorer.core.paths import models_dir
from explorer.core.placement import Placement
from explorer.core.text import MESSAGE_LIMIT, shown

__all__ = ["FAMILIES", "LoadedModel", "builtin_names", "default_model_name", "load_checkpoint",
           "save_native", "supported_formats"]

DEFAULT_MODEL = "shakespeare"
MAX_CONFIG_BYTES = 4 * 2**20  # a config.json is a few kB


def builtin_names() -> list[str]:
    root = models_dir()
    found = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
    return found + [worked_example.NAME]


def default_model_name() -> str:
    names = builtin_names()
    return DEFAULT_MODEL if DEFAULT_MODEL in names else names[0]


def supported_formats() -> str:
    # the long list of model types last: a message capped at its length loses its tail, not the other formats
    return ("native transformer-explorer directories; nanoGPT ckpt.pt files"
            + "; GGUF files (" + ", ".join(gguf_config.ARCHS) + ")"
            + f"; built-in models: {', '.join(builtin_names())}"
            + "; Hugging Face directories with model_type " + ", ".join(repr(k) for k in FAMILIES))


def load_checkpoint(source: str | Path | None = None, device: str = "auto", dtype: str = "float32",
                    progress: Progress | None = None, cancel: CancelLike = None,
                    placement: Placement | None = None, weights: str = "auto") -> LoadedModel:
    """Load a built-in model by name, or a checkpoint directory (or a file inside one).

    Everything is checked before it is allocated (``validate``); tensors are read one at a time in
    ``dtype``. ``progress(i, n, name)`` is called before each tensor; ``cancel`` (a ``Cancel``, a callable or a
    ``threading.Event``) stops the load between tensors with ``LoadCancelled``. Every failure is an
    ``ExplorerError`` whose message is one line (an unexpected one is an ``InternalError``).
    ``placement`` (core/placement.py, needs accelerate) lays the model out across devices and offloads
    what does not fit to CPU memory or disk. ``weights`` says how the weights are held (core/quant/storage.py):
    ``auto`` (default), ``keep`` (as the file stores them: GGUF blocks, half precision), ``dequantize`` (in
    ``dtype``), ``bfloat16`` or ``float16`` (matrices in that precision, computed in ``dtype``).
    """
    from explorer.core import arguments
    from explorer.core.cancel import asker
    from explorer.core.quant.storage import check_weights

    check_weights(weights)
    arguments.function(progress, "progress")
    asker(cancel)  # a wrong kind of cancel is one line now, not at the first tensor
    if placement is not None:
        from explorer.core.placement import Placement, require_accelerate

        arguments.instance(placement, Placement, "placement", "a Placement")
        require_accelerate()
        if weights not in ("auto", "dequantize"):
            raise CheckpointError(f"--weights {weights} cannot be combined with a device map: a placed model's "
                                  "weights are converted into its precision (--weights dequantize)")
        weights = "dequantize"
    source = default_model_name() if source is None else source
    if not isinstance(source, (str, os.PathLike)):
        raise CheckpointError(f"a checkpoint is a folder, a file or a built-in model name, not a "
                              f"{type(source).__name__} ({shown(repr(source), 60)})")
    ctx = None
    try:
        with loading(str(source), device, dtype, progress, cancel, placement, weights) as ctx:
            return _load(source, device, dtype)
    except CheckpointError as exc:
        text = str(exc)
        where = ctx.config_file if ctx is not None and ctx.config_file is not None else source
        if str(where) not in text and str(source) not in text and str(Path(str(source)).expanduser()) not in text:
            text = f"{where}: {text}"
        raise CheckpointError(shown(text, MESSAGE_LIMIT)) from None  # names from the files: escaped, one line, capped
    except ExplorerError as exc:
        if shown(str(exc), MESSAGE_LIMIT) != str(exc):
            exc.args = (shown(str(exc), MESSAGE_LIMIT),)
        raise
    except MemoryError:
        raise CheckpointError(f"{source}: ran out of memory while loading") from None
    except RecursionError:
        raise CheckpointError(f"{source}: nested too deeply to load") from None
    except Exception as exc:  # noqa: BLE001 - the one place where a bug becomes one line
        raise InternalError.wrap(exc, f"loading {source}") from exc


def _kind(path: Path) -> str:
    """'dir', 'file', 'missing' or 'other', without following the user into a PermissionError traceback."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as exc:
        reason = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
        raise CheckpointError(f"cannot open {path} ({reason})") from None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _load(source: str | Path, device: str, dtype: str) -> LoadedModel:
    if str(source).startswith("memory:"):  # a model held by a notebook (explorer.show): in_memory.register
        from explorer.core.checkpoint.in_memory import load_registered

        return load_registered(str(source), device, dtype)
    if str(source) == worked_example.NAME:
        model, tokenizer = worked_example.build()
        return LoadedModel(finish(model, device, dtype), tokenizer, worked_example.NAME, "built-in", "worked-example")
    path = Path(source).expanduser()
    kind = _kind(path)
    if kind == "missing" and (models_dir() / str(source)).is_dir():
        path, kind = models_dir() / str(source), "dir"
    if kind == "missing":  # an Ollama model name (llama3.2:1b) or an LM Studio publisher/repo/file.gguf
        local = local_stores.resolve(str(source))
        if local is not None:
            return gguf_format.load_gguf(local.path, device, dtype, name=local.name)
    cached = hub_cache.resolve(path if kind != "missing" else source)  # Hugging Face cache folders and org/name ids
    if cached is not None:
        loaded = _load_path(cached.path, _kind(cached.path), device, dtype)
        snapshot = cached.path if cached.path.is_dir() else cached.path.parent
        if loaded.tokenizer.name.startswith(snapshot.name):  # "<hash> tokenizer" -> "org/name tokenizer"
            loaded.tokenizer.name = cached.name + loaded.tokenizer.name[len(snapshot.name):]
        loaded.name = loaded.repo_id = cached.name
        return loaded
    return _load_path(path, kind, device, dtype)


def _load_path(path: Path, kind: str, device: str, dtype: str) -> LoadedModel:
    if kind == "missing":
        raise CheckpointError(f"no checkpoint at {path}; give a directory, a file in one, a GGUF file or "
                              f"Ollama model name, or a built-in name ({', '.join(builtin_names())})")
    if kind == "other":
        raise CheckpointError(f"{path} is neither a directory nor a regular file")
    if kind == "file" and path.suffix in nanogpt.SUFFIXES:
        return nanogpt.load_nanogpt(path, device, dtype)
    if kind == "file" and (path.suffix.lower() == ".gguf" or is_gguf(path)):  # Ollama's blobs have no suffix
        return gguf_format.load_gguf(path, device, dtype)
    if kind == "file":
        path = path.parent
    if not os.access(path, os.R_OK | os.X_OK):
        raise CheckpointError(f"cannot open {path} (permission denied)")
    if _kind(path / "config.json") == "missing" and _kind(path / "ckpt.pt") == "file":  # a nanoGPT out_dir
        return nanogpt.load_nanogpt(path / "ckpt.pt", device, dtype)
    if _kind(path / "config.json") == "missing" and (ggufs := local_stores.gguf_files(path)):  # a GGUF folder
        if len(ggufs) > 1:
            raise CheckpointError(f"{path} holds {len(ggufs)} GGUF files; open one of them: "
                                  + ", ".join(p.name for p in ggufs[:8]) + (" ..." if len(ggufs) > 8 else ""))
        return gguf_format.load_gguf(ggufs[0], device, dtype)
    config = read_json(path / "config.json", MAX_CONFIG_BYTES)
    current_load().config_file = path / "config.json"
    if config.get("format") == NATIVE_FORMAT:
        return load_native(path, config, device, dtype)
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in FAMILIES:
        return load_family(FAMILIES[model_type], path, config, device, dtype)
    if model_type:
        archs = config.get("architectures")
        arch = ", ".join(map(str, archs)) if isinstance(archs, list) and archs else model_type
        raise CheckpointError(f"{path / 'config.json'}: unsupported architecture {arch!r:.80} (model_type "
                              f"{model_type!r:.80}); supported: " + supported_formats())
    raise CheckpointError(f"{path / 'config.json'} names no known format; supported: " + supported_formats())
