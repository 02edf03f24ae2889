"""A multi-file export into a folder that may hold the user's own files: an export owns only what it wrote.

Every export writes ``export-manifest.json`` beside its files: the files (and the folders it made)
that it owns. A later export into the same folder replaces exactly those and keeps everything else
(notes, figures the user added). A non-empty folder without a manifest is not an export: it is
refused with one line, never replaced.

The swap is crash-safe. The new files are written into a hidden staging folder inside the target.
Then a complete copy of the old export (hard links, or copies where links are not possible) is put
in ``.explorer-export-previous`` and a journal is written; only then are the files moved in, the
old ones that are not written again removed and the new manifest put in place; removing the journal
is the commit. A run killed at any step leaves either the old export whole beside the journal
(the next run rolls back to it before doing anything else, so it survives a following failed run
too) or the new export complete. Nothing here globs a name: leftovers are found by exact names
inside the target, and the staging folders carry a marker file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from explorer.core.errors import ExportError

MANIFEST = "export-manifest.json"
STAGING_PREFIX = ".explorer-export-staging-"
STAGING_MARKER = ".explorer-export-staging"
BACKUP = ".explorer-export-previous"
BACKUP_PARTIAL = ".explorer-export-previous.partial"
JOURNAL = ".explorer-export-journal.json"
_OURS = (BACKUP, BACKUP_PARTIAL, JOURNAL)
_FORMAT = "transformer-explorer export"
_MANIFEST_CAP = 8 << 20


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide and not thread-safe


def _step(name: str) -> None:
    """Called between the swap's steps; tests replace it to kill the process there."""


def _shown(path: Path | str) -> str:
    from explorer.core.text import shown

    return shown(str(path))


# --- the manifest --------------------------------------------------------------------------------

def _checked_relative(text: object, where: Path) -> str:
    """A manifest entry: a relative path inside the folder (no '..', no absolute path, no control characters)."""
    if not isinstance(text, str) or not text or "\\" in text or any(ord(c) < 32 for c in text):
        raise ExportError(f"{_shown(where)} is not a readable export manifest (bad entry {_shown(repr(text))}); "
                          "choose a new or empty folder")
    pure = PurePosixPath(text)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in pure.parts) or str(pure) != text:
        raise ExportError(f"{_shown(where)} names a file outside its folder ({_shown(text)}); "
                          "choose a new or empty folder")
    return text


def read_manifest(folder: Path) -> dict | None:
    """The manifest of the export in ``folder`` ({"files": [...], "dirs": [...]}), or None when there is none."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            raw = f.read(_MANIFEST_CAP + 1)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _MANIFEST_CAP else None
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("files"), list) \
            or not isinstance(data.get("dirs", []), list):
        raise ExportError(f"{_shown(path)} is not a readable export manifest; choose a new or empty folder")
    files = [_checked_relative(f, path) for f in data["files"]]
    dirs = [_checked_relative(d, path) for d in data.get("dirs", [])]
    return {"files": files, "dirs": dirs}


def _manifest_bytes(files: list[str], dirs: list[str]) -> bytes:
    return json.dumps({"format": _FORMAT, "version": 1, "id": uuid.uuid4().hex,
                       "files": sorted(files), "dirs": sorted(dirs)}, indent=1).encode("utf-8")


def _listing(root: Path) -> tuple[list[str], list[str]]:
    """Files and folders under ``root`` (relative POSIX paths), the staging marker left out."""
    files, dirs = [], []
    for here, subdirs, names in os.walk(root):
        rel = Path(here).relative_to(root)
        dirs += [(rel / d).as_posix() for d in subdirs]
        files += [(rel / n).as_posix() for n in names if not (here == str(root) and n in (STAGING_MARKER, MANIFEST))]
    return files, dirs


# --- recovery of an interrupted run ---------------------------------------------------------------

def _is_staging(entry: Path) -> bool:
    """A staging folder of ours: our prefix, a real folder, and our marker in it (or still empty: killed
    between making it and marking it)."""
    if not entry.name.startswith(STAGING_PREFIX) or entry.is_symlink() or not entry.is_dir():
        return False
    return (entry / STAGING_MARKER).is_file() or not any(entry.iterdir())


def _through_link(folder: Path, rel: str) -> bool:
    """Whether a folder on the way to ``rel`` inside ``folder`` is a symbolic link (the user's, pointing
    elsewhere): nothing is removed or written through it."""
    here = folder
    for part in PurePosixPath(rel).parts[:-1]:
        here = here / part
        if here.is_symlink():
            return True
    return False


def _rmdir_empty(folder: Path, rel_dirs: list[str]) -> None:
    """Remove the listed folders that are empty, deepest first (never one holding anything)."""
    for rel in sorted(rel_dirs, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):
            (folder / rel).rmdir()


def recover(folder: Path) -> None:
    """Undo what an interrupted export left in ``folder``: roll back a swap that had not committed
    (the old export comes back whole), remove staging folders and a stale backup."""
    journal = folder / JOURNAL
    if journal.is_file() and not journal.is_symlink():
        try:
            data = json.loads(journal.read_bytes()[:_MANIFEST_CAP].decode("utf-8"))
            old = [_checked_relative(f, journal) for f in data["old"]]
            new = [_checked_relative(f, journal) for f in data["new"]]
            new_dirs = [_checked_relative(d, journal) for d in data["new_dirs"]]
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise ExportError(f"{_shown(journal)} (left by an interrupted export) cannot be read ({exc}); "
                              f"the previous export is kept in {_shown(folder / BACKUP)}") from None
        backup = folder / BACKUP
        for rel in set(new) - set(old):
            with contextlib.suppress(FileNotFoundError):
                (folder / rel).unlink()
        for rel in old:
            if (backup / rel).exists():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(backup / rel, folder / rel)
        _rmdir_empty(folder, new_dirs)
        journal.unlink()
    for name in (BACKUP, BACKUP_PARTIAL):
        if (folder / name).is_dir() and not (folder / name).is_symlink():
            shutil.rmtree(folder / name, ignore_errors=True)
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            if _is_staging(entry):
                shutil.rmtree(entry, ignore_errors=True)


# --- the export ------------------------------------------------------------------------------------

def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _commit(folder: Path, staging: Path, old: dict | None) -> None:
    new_files, new_dirs_all = _listing(staging)
    old_files = old["files"] if old else []
    old_dirs = old["dirs"] if old else []
    for rel in new_files:  # a file of the user's where the export would write: refuse, touch nothing
        if rel not in old_files and os.path.lexists(folder / rel) or _through_link(folder, rel):
            raise ExportError(f"{_shown(folder / rel)} is not from the earlier export and would be overwritten; "
                              "move it or choose another folder")
    old_files = [rel for rel in old_files if not _through_link(folder, rel)]  # never through the user's links
    made_dirs = [d for d in new_dirs_all if d in old_dirs or not (folder / d).exists()]
    _step("backup")
    partial = folder / BACKUP_PARTIAL
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for rel in [*old_files, MANIFEST] if old else []:
        if (folder / rel).is_file():
            _link_or_copy(folder / rel, partial / rel)
            _step("backup file")
    os.replace(partial, folder / BACKUP)
    _step("journal")
    journal = {"old": [*old_files, MANIFEST] if old else [], "new": [*new_files, MANIFEST],
               "new_dirs": [d for d in made_dirs if d not in old_dirs]}
    tmp = folder / (JOURNAL + ".tmp")
    tmp.write_text(json.dumps(journal))
    os.replace(tmp, folder / JOURNAL)
    _step("move")
    for rel in new_files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / rel, folder / rel)
        _step("move file")
    for rel in set(old_files) - set(new_files):
        with contextlib.suppress(FileNotFoundError):
            (folder / rel).unlink()
        _step("remove old file")
    _rmdir_empty(folder, [d for d in old_dirs if d not in made_dirs])
    (staging / MANIFEST).write_bytes(_manifest_bytes(new_files, made_dirs))
    os.replace(staging / MANIFEST, folder / MANIFEST)
    _step("commit")
    (folder / JOURNAL).unlink()  # the commit: from here the new export is the one
    _step("clean up")
    shutil.rmtree(folder / BACKUP, ignore_errors=True)


@contextlib.contextmanager
def export_directory(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh staging folder; when the block completes, its files become the export in
    ``target`` (see the module's docstring). On failure ``target`` is as it was (a folder this
    call created is removed again)."""
    folder = Path(os.path.abspath(os.fspath(target)))
    if os.path.lexists(folder) and not folder.is_dir():
        raise ExportError(f"{_shown(folder)} exists and is not a folder: choose a new or empty folder")
    created = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    staging = None
    try:
        recover(folder)
        old = read_manifest(folder)
        if old is None and any(e.name not in _OURS for e in folder.iterdir()):
            raise ExportError(f"{_shown(folder)} is not empty and is not an earlier export (no {MANIFEST}): "
                              "nothing was written; choose a new or empty folder")
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
        (staging / STAGING_MARKER).write_bytes(b"")
        try:
            yield staging
        except OSError as exc:  # name the file as the user asked for it, not its temporary place
            name = exc.filename
            if isinstance(name, str) and Path(name).is_relative_to(staging):
                exc.filename = str(folder / Path(name).relative_to(staging))
            raise
        for here, subdirs, _names in os.walk(staging):  # mkdtemp makes 0700; an export gets ordinary permissions
            for d in subdirs:
                os.chmod(os.path.join(here, d), 0o777 & ~_UMASK)
        _commit(folder, staging, old)
    except BaseException:
        if (folder / JOURNAL).exists():
            with contextlib.suppress(Exception):
                recover(folder)
        raise
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            (folder / BACKUP_PARTIAL).exists() and shutil.rmtree(folder / BACKUP_PARTIAL)
        for made in created:  # only when empty: a failed first export leaves no empty folders
            with contextlib.suppress(OSError):
                made.rmdir()
