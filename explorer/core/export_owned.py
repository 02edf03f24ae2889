"""What in an export's folder is ours (the manifest, the journal, the backup and staging folders), and the
recovery of an interrupted export (``explorer.core.export_folder`` is the export itself).

Ours is proved, never assumed from a name: the manifest is a regular file in our format; the backup
folder holds a marker with the id that the journal names; a staging folder holds its marker (or is
still empty). The journal is read only when it is such a journal of ours, and each of its entries is a
relative path inside the folder, as the manifest's are. Every file is looked at (``lstat``) before it
is removed or replaced, and nothing is followed through a link. A folder or file of the user's under
one of our names is refused with one line, and never removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import uuid
from pathlib import Path, PurePosixPath

from explorer.core.errors import ExportError

MANIFEST = "export-manifest.json"
STAGING_PREFIX = ".explorer-export-staging-"
STAGING_MARKER = ".explorer-export-staging"
BACKUP = ".explorer-export-previous"
BACKUP_PARTIAL = ".explorer-export-previous.partial"
BACKUP_MARKER = ".explorer-export-backup"  # in the backup folder: the id of the journal it belongs to
JOURNAL = ".explorer-export-journal.json"
JOURNAL_TMP = JOURNAL + ".tmp"
OURS = (BACKUP, BACKUP_PARTIAL, JOURNAL)
FORMAT = "transformer-explorer export"
JOURNAL_FORMAT = "transformer-explorer export journal"
JOURNAL_HEAD = b'{"format": "' + JOURNAL_FORMAT.encode() + b'"'  # how our journal starts (json.dumps, format first)
MANIFEST_CAP = 8 << 20


def shown_path(path: Path | str) -> str:
    from explorer.core.text import shown

    return shown(str(path))


# --- the manifest --------------------------------------------------------------------------------

def checked_relative(text: object, where: Path) -> str:
    """A manifest entry: a relative path inside the folder (no '..', no absolute path, no control characters)."""
    if not isinstance(text, str) or not text or "\\" in text or any(ord(c) < 32 for c in text):
        raise ExportError(f"{shown_path(where)} is not a readable export manifest (bad entry {shown_path(repr(text))}); "
                          "choose a new or empty folder")
    pure = PurePosixPath(text)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in pure.parts) or str(pure) != text:
        raise ExportError(f"{shown_path(where)} names a file outside its folder ({shown_path(text)}); "
                          "choose a new or empty folder")
    if pure.parts[0].startswith(".explorer-export"):  # the journal, the backup, the staging folders: never an entry
        raise ExportError(f"{shown_path(where)} names one of the export's own working files ({shown_path(text)}); "
                          "choose a new or empty folder")
    return text


def read_manifest(folder: Path) -> dict | None:
    """The manifest of the export in ``folder`` ({"files": [...], "dirs": [...]}), or None when there is none."""
    path = folder / MANIFEST
    st = lstat_or_none(path)
    if st is None:
        return None
    try:
        if not stat.S_ISREG(st.st_mode):  # a link or a folder under the manifest's name is not a manifest of ours
            raise ValueError("not a regular file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MANIFEST_CAP + 1)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= MANIFEST_CAP else None
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), list) \
            or not isinstance(data.get("dirs", []), list):
        raise ExportError(f"{shown_path(path)} is not a readable export manifest; choose a new or empty folder")
    files = [checked_relative(f, path) for f in data["files"]]
    dirs = [checked_relative(d, path) for d in data.get("dirs", [])]
    return {"files": files, "dirs": dirs}


def manifest_bytes(files: list[str], dirs: list[str]) -> bytes:
    return json.dumps({"format": FORMAT, "version": 1, "id": uuid.uuid4().hex,
                       "files": sorted(files), "dirs": sorted(dirs)}, indent=1).encode("utf-8")


def listing(root: Path) -> tuple[list[str], list[str]]:
    """Files and folders under ``root`` (relative POSIX paths), the staging marker left out."""
    files, dirs = [], []
    for here, subdirs, names in os.walk(root):
        rel = Path(here).relative_to(root)
        dirs += [(rel / d).as_posix() for d in subdirs]
        files += [(rel / n).as_posix() for n in names if not (here == str(root) and n in (STAGING_MARKER, MANIFEST))]
    return files, dirs


# --- what is ours in the folder ---------------------------------------------------------------------

def lstat_or_none(path: Path) -> os.stat_result | None:
    """``path``'s own status (a link is not followed), or None when nothing is there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def is_regular(path: Path) -> bool:
    st = lstat_or_none(path)
    return st is not None and stat.S_ISREG(st.st_mode)


def reserved(name: str) -> bool:
    """A name the export uses for itself in the target (its journal, backup and staging folders)."""
    return name in OURS or name == JOURNAL_TMP or name.startswith(STAGING_PREFIX)


def _marker_text(folder: Path, marker: str) -> str | None:
    """The text of our marker file in ``folder`` when ``folder`` is a real folder (not a link) holding it as a
    regular file, else None."""
    st = lstat_or_none(folder)
    if st is None or not stat.S_ISDIR(st.st_mode) or not is_regular(folder / marker):
        return None
    try:
        fd = os.open(folder / marker, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read(200).decode("utf-8", "replace")
    except OSError:
        return None


def _empty_dir(path: Path) -> bool:
    st = lstat_or_none(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return False
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _leftover_of_ours(entry: Path) -> bool:
    """Whether ``entry`` (under a reserved name) is what an interrupted export of ours left: the backup
    holds our marker; a staging or partial backup folder holds our marker or is still empty (killed between
    making it and marking it); a temporary journal is a regular file that starts like our journal."""
    name = entry.name
    if name == BACKUP:
        return _marker_text(entry, BACKUP_MARKER) is not None
    if name == BACKUP_PARTIAL:
        return _marker_text(entry, BACKUP_MARKER) is not None or _empty_dir(entry)
    if name.startswith(STAGING_PREFIX):
        return _marker_text(entry, STAGING_MARKER) is not None or _empty_dir(entry)
    if name == JOURNAL_TMP:
        if not is_regular(entry):
            return False
        with contextlib.suppress(OSError), open(entry, "rb") as f:
            return f.read(len(JOURNAL_HEAD)) == JOURNAL_HEAD
        return False
    return name == JOURNAL and is_regular(entry)  # what it says is checked by read_journal


def _foreign(folder: Path) -> Path | None:
    """The first entry of ``folder`` that has one of our reserved names and is not ours (the user's)."""
    with contextlib.suppress(OSError):
        for entry in sorted(folder.iterdir()):
            if reserved(entry.name) and not _leftover_of_ours(entry):
                return entry
    return None


def refuse_foreign(folder: Path) -> None:
    entry = _foreign(folder)
    if entry is not None:
        raise ExportError(f"{shown_path(entry)} is not from an export of ours (the export keeps this name for its own "
                          "files): nothing was written; move or rename it, or choose another folder")


# --- recovery of an interrupted run ---------------------------------------------------------------

def through_link(folder: Path, rel: str) -> bool:
    """Whether a folder on the way to ``rel`` inside ``folder`` is a symbolic link (the user's, pointing
    elsewhere): nothing is removed, read or written through it."""
    here = folder
    for part in PurePosixPath(rel).parts[:-1]:
        here = here / part
        if here.is_symlink():
            return True
    return False


def rmdir_empty(folder: Path, rel_dirs: list[str]) -> None:
    """Remove the listed folders that are empty, deepest first (never one holding anything)."""
    for rel in sorted(rel_dirs, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):
            (folder / rel).rmdir()


def read_journal(folder: Path) -> dict | None:
    """The journal an interrupted export of ours left in ``folder`` (None: there is none). It is ours only
    when it is a regular file in our format whose id is the one marked in our backup folder beside it;
    every entry must be a relative path inside the folder. Anything else is refused, touching nothing."""
    path = folder / JOURNAL
    st = lstat_or_none(path)
    if st is None:
        return None
    data = None
    if stat.S_ISREG(st.st_mode) and st.st_size <= MANIFEST_CAP:
        with contextlib.suppress(OSError, UnicodeDecodeError, ValueError):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read(MANIFEST_CAP + 1).decode("utf-8"))
    ours = (isinstance(data, dict) and data.get("format") == JOURNAL_FORMAT and isinstance(data.get("id"), str)
            and all(isinstance(data.get(k), list) for k in ("old", "new", "new_dirs"))
            and _marker_text(folder / BACKUP, BACKUP_MARKER) == data["id"])
    if not ours:
        raise ExportError(f"{shown_path(path)} is not from an interrupted export of ours: nothing was written or removed; "
                          "move it away or choose another folder")
    return {key: [checked_relative(f, path) for f in data[key]] for key in ("old", "new", "new_dirs")}


def roll_back(folder: Path, journal: dict) -> None:
    """Put the old export back from the backup: the new files that were not old ones go, the old ones return.
    Only regular files are removed or replaced, never through a link, never outside the folder."""
    backup = folder / BACKUP
    for rel in set(journal["new"]) - set(journal["old"]):
        if not through_link(folder, rel) and is_regular(folder / rel):
            (folder / rel).unlink()
    for rel in journal["old"]:
        source, target = backup / rel, folder / rel
        if through_link(backup, rel) or through_link(folder, rel) or not is_regular(source):
            continue
        if lstat_or_none(target) is not None and not is_regular(target):  # a folder or a link in its place: the user's
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
    rmdir_empty(folder, journal["new_dirs"])
    (folder / JOURNAL).unlink()


def _remove_leftovers(folder: Path) -> None:
    """Remove what interrupted exports of ours left (``refuse_foreign`` has found nothing else there)."""
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            if entry.name == JOURNAL or not reserved(entry.name) or not _leftover_of_ours(entry):
                continue
            if entry.name == JOURNAL_TMP:
                entry.unlink()
            elif _empty_dir(entry):
                entry.rmdir()
            else:
                shutil.rmtree(entry, ignore_errors=True)  # a real folder of ours: links inside are removed, not followed


def recover(folder: Path) -> None:
    """Undo what an interrupted export left in ``folder``: roll back a swap that had not committed (the old
    export comes back whole), then remove our staging folders and a stale backup. A name of ours that is not
    ours, or a journal that is not, is refused (``ExportError``) before anything is touched."""
    refuse_foreign(folder)
    journal = read_journal(folder)
    if journal is not None:
        roll_back(folder, journal)
    _remove_leftovers(folder)
