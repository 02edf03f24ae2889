"""Checkpoints in the Hugging Face cache, found offline: nothing is ever downloaded.

``huggingface_hub`` keeps each repository as ``<cache>/models--org--name/`` with
``refs/<branch>`` (a text file holding a commit hash), ``snapshots/<hash>/`` (the files, as links
into ``blobs/``) and ``blobs/``. The cache is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``.

``resolve`` turns what the user gave into a snapshot directory and a display name ``org/name``:
a ``models--org--name`` folder, a ``snapshots/<hash>`` folder (or a file in one) inside it, or a
repository id ``org/name`` that is not a local path. The snapshot is the one ``refs/main`` names;
without it, the only snapshot, or else the most recently modified one that has a ``config.json``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from explorer.core.errors import CheckpointError

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_HASH = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
_PREFIX = "models--"


def cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories (the directory need not exist)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def repo_folder_name(repo_id: str) -> str:
    return _PREFIX + repo_id.replace("/", "--")


def repo_id_of(folder: Path) -> str | None:
    """``models--org--name`` -> ``org/name``; None for any other folder name."""
    name = Path(folder).name
    if not name.startswith(_PREFIX) or "--" not in name[len(_PREFIX):]:
        return None
    org, _, repo = name[len(_PREFIX):].partition("--")
    return f"{org}/{repo}" if org and repo else None


def _ref(repo: Path, branch: str = "main") -> str | None:
    path = repo / "refs" / branch
    try:
        if not path.is_file() or path.stat().st_size > 200:
            return None
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text if _HASH.match(text) else None


def snapshot_of(repo: Path) -> Path:
    """The snapshot directory to open inside a ``models--org--name`` folder (see the module doc)."""
    snapshots = repo / "snapshots"
    ref = _ref(repo)
    if ref and (snapshots / ref).is_dir():
        return snapshots / ref
    found = sorted(p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    if not found:
        raise CheckpointError(f"{repo} holds no snapshot: the download is incomplete (nothing is downloaded here)")
    if len(found) == 1:
        return found[0]
    with_config = [p for p in found if (p / "config.json").is_file()] or found
    return max(with_config, key=lambda p: (p.stat().st_mtime, p.name))


@dataclass(frozen=True)
class Resolved:
    path: Path  # the snapshot directory (or the file inside it that was given)
    name: str  # org/name


def resolve(source: str | Path) -> Resolved | None:
    """A cache folder, a snapshot inside one, or an ``org/name`` found in the cache; None if ``source`` is none."""
    text = str(source)
    path = Path(text).expanduser()
    if path.exists():
        if repo_id_of(path) and (path / "snapshots").is_dir():
            return Resolved(snapshot_of(path), repo_id_of(path) or "")
        for parent in [path, *path.parents][:4]:  # .../models--org--name/snapshots/<hash>[/file]
            if parent.parent.name == "snapshots" and repo_id_of(parent.parent.parent):
                return Resolved(path, repo_id_of(parent.parent.parent) or "")
        return None
    if not REPO_ID.match(text):
        return None
    repo = cache_dir() / repo_folder_name(text)
    if not repo.is_dir():
        raise CheckpointError(f"no checkpoint at {text}: it is not a local path, and as a repository id it is not in "
                              f"the Hugging Face cache ({cache_dir()}); nothing is downloaded here: download it "
                              f"first (huggingface-cli download {text}) or give a local folder")
    return Resolved(snapshot_of(repo), text)


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    path: Path  # the snapshot that would be opened
    size_bytes: int  # of the snapshot's files
    has_config: bool


def _size(snapshot: Path) -> int:
    total = 0
    for entry in snapshot.rglob("*"):
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            continue
    return total


def list_cached(root: Path | None = None) -> list[CachedModel]:
    """Every model repository in the cache that has a snapshot, by repository id."""
    root = cache_dir() if root is None else Path(root)
    if not root.is_dir():
        return []
    out = []
    for repo in sorted(root.iterdir()):
        repo_id = repo_id_of(repo)
        if repo_id is None or not repo.is_dir():
            continue
        try:
            snapshot = snapshot_of(repo)
        except (CheckpointError, OSError):
            continue
        out.append(CachedModel(repo_id, snapshot, _size(snapshot), (snapshot / "config.json").is_file()))
    return out
