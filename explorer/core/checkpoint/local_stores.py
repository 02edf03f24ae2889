"""GGUF models that Ollama and LM Studio keep on this machine, found offline by their model names.

* **Ollama** keeps ``<root>/manifests/<host>/<namespace>/<model>/<tag>`` (a JSON manifest) and
  ``<root>/blobs/sha256-<hex>`` (the content); the manifest's layer of media type
  ``application/vnd.ollama.image.model`` names the GGUF blob by its digest. The root is
  ``$OLLAMA_MODELS``, else ``~/.ollama/models``. A model name is written as Ollama writes it:
  ``llama3.2:1b`` (``registry.ollama.ai/library``, tag ``latest`` when none is given),
  ``user/model:tag`` or ``host/namespace/model:tag``.
* **LM Studio** keeps ``<root>/<publisher>/<repository>/<file>.gguf``; the root is
  ``$LMSTUDIO_MODELS`` (this app's own override), else ``~/.lmstudio/models``, else
  ``~/.cache/lm-studio/models``. A model is named ``publisher/repository/file.gguf``.

Manifests are hostile input like any file: read capped, type-checked, and a digest must be
``sha256:`` and 64 hex digits, so a manifest cannot point outside the blob folder. Multimodal
projector files (``mmproj*.gguf``) are not listed: they are not language models.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from explorer.core.checkpoint.validate import read_capped
from explorer.core.errors import CheckpointError

MODEL_MEDIA = "application/vnd.ollama.image.model"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MAX_MANIFEST_BYTES = 1 * 2**20
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class LocalModel:
    name: str  # what the user types: llama3.2:1b, publisher/repo/file.gguf
    store: str  # "Ollama" or "LM Studio"
    path: Path  # the GGUF file (an Ollama blob has no suffix)
    size_bytes: int


def ollama_dir() -> Path:
    value = os.environ.get("OLLAMA_MODELS")
    return Path(value).expanduser() if value else Path.home() / ".ollama" / "models"


def lmstudio_dirs() -> list[Path]:
    value = os.environ.get("LMSTUDIO_MODELS")
    if value:
        return [Path(value).expanduser()]
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def ollama_parts(name: str) -> tuple[str, str, str, str] | None:
    """(host, namespace, model, tag) of an Ollama model name, or None when it cannot be one."""
    if not isinstance(name, str) or not name or name.count(":") > 1 or "\\" in name:
        return None
    base, _, tag = name.partition(":")
    parts = base.split("/")
    if len(parts) > 3 or (":" in name and not tag):
        return None
    host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
    if len(parts) == 3:
        host, namespace, model = parts
    elif len(parts) == 2:
        namespace, model = parts
    else:
        model = parts[0]
    tag = tag or DEFAULT_TAG
    if not all(_PART.match(p) for p in (host, namespace, model, tag)):
        return None
    return host, namespace, model, tag


def _display(host: str, namespace: str, model: str, tag: str) -> str:
    if host == DEFAULT_HOST:
        return f"{model}:{tag}" if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def model_blob(manifest: Path, root: Path) -> Path:
    """The GGUF blob an Ollama manifest names (checked: a regular file in ``root/blobs``)."""
    try:
        data = json.loads(read_capped(manifest, MAX_MANIFEST_BYTES, "an Ollama manifest").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError(f"{manifest} is not an Ollama manifest (not JSON)") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise CheckpointError(f"{manifest} is not an Ollama manifest (no list of layers)")
    digests = [layer.get("digest") for layer in layers if isinstance(layer, dict)
               and layer.get("mediaType") == MODEL_MEDIA]
    if not digests:
        raise CheckpointError(f"{manifest} names no model layer ({MODEL_MEDIA})")
    match = _DIGEST.match(digests[0]) if isinstance(digests[0], str) else None
    if match is None:
        raise CheckpointError(f"{manifest}: the model layer's digest {digests[0]!r:.80} is not sha256:<64 hex digits>")
    blob = root / "blobs" / f"sha256-{match.group(1)}"
    if not blob.is_file():
        raise CheckpointError(f"{manifest} names blob {blob.name}, which is missing from {blob.parent} "
                              "(an interrupted pull? run `ollama pull` again)")
    return blob


def resolve_ollama(name: str, root: Path | None = None) -> LocalModel | None:
    """The Ollama model ``name`` (``llama3.2:1b``), or None when no manifest of that name exists."""
    parts = ollama_parts(name)
    root = ollama_dir() if root is None else root
    if parts is None:
        return None
    manifest = root / "manifests" / Path(*parts)
    if not manifest.is_file():
        return None
    blob = model_blob(manifest, root)
    return LocalModel(_display(*parts), "Ollama", blob, blob.stat().st_size)


def list_ollama(root: Path | None = None) -> list[LocalModel]:
    """Every Ollama model with a readable manifest and its blob present, by name."""
    root = ollama_dir() if root is None else root
    found: list[LocalModel] = []
    base = root / "manifests"
    if not base.is_dir():
        return found
    for manifest in sorted(base.glob("*/*/*/*")):
        parts = manifest.relative_to(base).parts
        if not manifest.is_file() or not all(_PART.match(p) for p in parts):
            continue
        try:
            blob = model_blob(manifest, root)
            found.append(LocalModel(_display(*parts), "Ollama", blob, blob.stat().st_size))
        except (CheckpointError, OSError):
            continue  # a broken manifest is not listed; opening it by name says why
    return sorted(found, key=lambda m: m.name)


def list_lmstudio(roots: list[Path] | None = None) -> list[LocalModel]:
    """Every ``*.gguf`` in LM Studio's models folder (``publisher/repository/file.gguf``)."""
    found: list[LocalModel] = []
    for root in lmstudio_dirs() if roots is None else roots:
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*/*/*.gguf")):
            if path.is_file() and not path.name.lower().startswith("mmproj"):
                found.append(LocalModel(path.relative_to(root).as_posix(), "LM Studio", path, path.stat().st_size))
    return found


def gguf_files(directory: Path) -> list[Path]:
    """The language-model GGUF files directly in ``directory`` (a GGUF repository's snapshot, an LM Studio folder)."""
    try:
        return sorted(p for p in directory.glob("*.gguf") if p.is_file() and not p.name.lower().startswith("mmproj"))
    except OSError:
        return []


def list_local() -> list[LocalModel]:
    return list_ollama() + list_lmstudio()


def resolve(source: str) -> LocalModel | None:
    """An Ollama model name or an LM Studio ``publisher/repository/file.gguf`` that exists on this machine."""
    found = resolve_ollama(source)
    if found is not None:
        return found
    if source.endswith(".gguf") and source.count("/") == 2 and ".." not in source.split("/"):
        for root in lmstudio_dirs():
            path = root / source
            if path.is_file():
                return LocalModel(source, "LM Studio", path, path.stat().st_size)
    return None
