"""The offload folder: where blocks that fit nowhere else go on disk, and how they are removed again.

``--offload-dir DIR`` must exist (a typo never creates a tree of folders). Each model gets a new
subfolder ``DIR/offload-XXXX`` holding one safetensors file per offloaded block and a marker naming the
process that owns it. The subfolder is ours to remove, and nothing else in DIR is: it goes when the
model is closed (``release_offload``) or garbage-collected, and when the process ends (``weakref.finalize``
runs at exit); one left by a process that crashed or was killed goes at the next start, once its
process is gone (``remove_stale_offload``: the pid in the marker, and its start time, so a reused pid
does not keep it).
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from pathlib import Path
from typing import Any

from explorer.core.errors import ArgumentError, ExplorerError
from explorer.core.text import shown

OFFLOAD_PREFIX = "offload-"
OFFLOAD_MARKER = ".explorer-offload.json"  # in each subfolder of ours: the process that owns it
_OFFLOAD_FORMAT = "transformer-explorer offload"
_RELEASERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its subfolders' removers


def checked_offload_root(folder: str | os.PathLike[str]) -> Path:
    """``--offload-dir`` as given: an existing folder (never created, parents and all, from a typo)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        what = "is not a folder" if os.path.lexists(root) else "does not exist"
        raise ArgumentError(f"--offload-dir {shown(root)} {what}: give an existing folder (the offloaded blocks go "
                            "into a new subfolder of it, removed when the model is closed)")
    return root


def _started(pid: int) -> float | None:
    """When process ``pid`` started (psutil, which accelerate brings), None when it is gone, 0.0 when it is
    there but its start time cannot be read."""
    try:
        import psutil
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return 0.0
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:  # a zombie too: it has ended
        return None
    except psutil.Error:
        return 0.0


def _owner(folder: Path) -> tuple[int, float] | None:
    """(pid, start time) of the process that owns ``folder``: a real folder of ours (our marker in it), else None."""
    marker = folder / OFFLOAD_MARKER
    try:
        if folder.is_symlink() or not folder.is_dir() or marker.is_symlink() or not marker.is_file():
            return None
        data = json.loads(marker.read_text(encoding="utf-8")[:4096])
        if data.get("format") != _OFFLOAD_FORMAT or not isinstance(data.get("pid"), int):
            return None
        return data["pid"], float(data.get("started") or 0.0)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def remove_stale_offload(root: Path) -> list[Path]:
    """Remove the subfolders of ``root`` that a process of ours left when it crashed (our marker, and its
    process is gone, or the pid now names a later process); nothing else in ``root`` is touched."""
    import shutil

    removed = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            owner = _owner(entry) if entry.name.startswith(OFFLOAD_PREFIX) else None
            if owner is None or owner[0] == os.getpid():
                continue
            started = _started(owner[0])
            if started is None or (owner[1] and started and abs(started - owner[1]) > 1.0):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _remove_offload(folder: str) -> None:
    import shutil

    if _owner(Path(folder)) is not None:  # still our own folder (never a link put in its place)
        shutil.rmtree(folder, ignore_errors=True)


def offload_folder(model: Any, placement: Any) -> Path:
    """A new subfolder of ``placement.offload_dir`` (which must exist) for ``model``'s offloaded blocks, never
    over a user's files. It carries a marker naming this process, and goes when the model is closed
    (``release_offload``) or garbage-collected, or when the process ends; one left by a crash goes at the
    next start (``remove_stale_offload``)."""
    import tempfile

    root = checked_offload_root(placement.offload_dir)
    remove_stale_offload(root)
    try:
        folder = Path(tempfile.mkdtemp(prefix=OFFLOAD_PREFIX, dir=root))
        (folder / OFFLOAD_MARKER).write_text(json.dumps({"format": _OFFLOAD_FORMAT, "pid": os.getpid(),
                                                         "started": _started(os.getpid()) or 0.0}))
    except OSError as exc:
        raise ExplorerError(f"cannot write offloaded blocks to {shown(root)} ({exc.strerror or exc})") from None
    _RELEASERS.setdefault(model, []).append(weakref.finalize(model, _remove_offload, str(folder)))
    return folder


def release_offload(model: Any) -> None:
    """Remove ``model``'s offload subfolders now (the model is being closed; its disk blocks are gone with them)."""
    for finalizer in _RELEASERS.pop(model, []):
        finalizer()
