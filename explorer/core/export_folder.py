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
inside the target, and each is proved ours before it is touched (``explorer.core.export_owned``): a
folder that is neither an export of ours nor empty is refused before anything in it is changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from explorer.core.errors import ExportError
from explorer.core.export_owned import (BACKUP, BACKUP_MARKER, BACKUP_PARTIAL, JOURNAL, JOURNAL_FORMAT,  # noqa: F401
                                       JOURNAL_TMP, MANIFEST, STAGING_MARKER, STAGING_PREFIX, is_regular, listing,
                                       lstat_or_none, manifest_bytes, read_journal, read_manifest, recover,
                                       refuse_foreign, reserved, rmdir_empty, roll_back, shown_path, through_link)


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide and not thread-safe


def _step(name: str) -> None:
    """Called between the swap's steps; tests replace it to kill the process there."""


# --- the export ------------------------------------------------------------------------------------

def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _replace_file(source: Path, target: Path) -> None:
    """``source`` moved onto ``target``, which must be absent or a regular file (looked at first: a folder or a
    link put there since is the user's, and is refused)."""
    st = lstat_or_none(target)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ExportError(f"{shown_path(target)} is not from the earlier export and would be overwritten; "
                          "move it or choose another folder")
    os.replace(source, target)


def _commit(folder: Path, staging: Path, old: dict | None, state: dict) -> None:
    new_files, new_dirs_all = listing(staging)
    old_files = old["files"] if old else []
    old_dirs = old["dirs"] if old else []
    for rel in new_files:  # a file of the user's where the export would write: refuse, touch nothing
        st = lstat_or_none(folder / rel)
        theirs = st is not None and (rel not in old_files or not stat.S_ISREG(st.st_mode))
        if theirs or through_link(folder, rel):
            raise ExportError(f"{shown_path(folder / rel)} is not from the earlier export and would be overwritten; "
                              "move it or choose another folder")
    # never through the user's links, never a link or folder the user put where an old file was
    old_files = [rel for rel in old_files if not through_link(folder, rel) and is_regular(folder / rel)]
    made_dirs = [d for d in new_dirs_all if d in old_dirs or not os.path.lexists(folder / d)]
    _step("backup")
    ident = uuid.uuid4().hex
    partial = folder / BACKUP_PARTIAL
    partial.mkdir()  # recover() removed a partial backup of ours; one of the user's was refused
    state["partial"] = True
    (partial / BACKUP_MARKER).write_text(ident)
    for rel in [*old_files, MANIFEST] if old else []:
        if is_regular(folder / rel):
            _link_or_copy(folder / rel, partial / rel)
            _step("backup file")
    os.replace(partial, folder / BACKUP)
    state["partial"], state["backup"] = False, True
    _step("journal")
    journal = {"format": JOURNAL_FORMAT, "id": ident, "old": [*old_files, MANIFEST] if old else [],
               "new": [*new_files, MANIFEST], "new_dirs": [d for d in made_dirs if d not in old_dirs]}
    tmp = folder / JOURNAL_TMP
    with open(tmp, "x", encoding="utf-8") as f:  # never over something already there
        f.write(json.dumps(journal))
    os.replace(tmp, folder / JOURNAL)
    state["journal"] = {key: journal[key] for key in ("old", "new", "new_dirs")}
    _step("move")
    for rel in new_files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        _replace_file(staging / rel, folder / rel)
        _step("move file")
    for rel in set(old_files) - set(new_files):
        if is_regular(folder / rel):
            (folder / rel).unlink()
        _step("remove old file")
    rmdir_empty(folder, [d for d in old_dirs if d not in made_dirs])
    (staging / MANIFEST).write_bytes(manifest_bytes(new_files, made_dirs))
    _replace_file(staging / MANIFEST, folder / MANIFEST)
    _step("commit")
    (folder / JOURNAL).unlink()  # the commit: from here the new export is the one
    state["journal"] = None
    _step("clean up")
    shutil.rmtree(folder / BACKUP, ignore_errors=True)
    state["backup"] = False


def _is_export_or_empty(folder: Path) -> bool:
    """Whether an export may be written into ``folder`` (which has no journal of ours): it holds an export of
    ours (its manifest), or nothing but what an interrupted export of ours left there."""
    return read_manifest(folder) is not None or all(reserved(e.name) for e in folder.iterdir())


@contextlib.contextmanager
def export_directory(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh staging folder; when the block completes, its files become the export in
    ``target`` (see the module's docstring). On failure ``target`` is as it was (a folder this
    call created is removed again). Nothing in ``target`` is removed or changed before it is known
    to be an export of ours (or empty)."""
    folder = Path(os.path.abspath(os.fspath(target)))
    if os.path.lexists(folder) and not folder.is_dir():
        raise ExportError(f"{shown_path(folder)} exists and is not a folder: choose a new or empty folder")
    created = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    staging = None
    state: dict = {"journal": None, "backup": False, "partial": False}  # what this run made (and may undo)
    try:
        refuse_foreign(folder)
        journal = read_journal(folder)
        if journal is None and not _is_export_or_empty(folder):
            raise ExportError(f"{shown_path(folder)} is not empty and is not an earlier export (no {MANIFEST}): "
                              "nothing was written; choose a new or empty folder")
        recover(folder)
        old = read_manifest(folder)
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
        _commit(folder, staging, old, state)
    except BaseException:
        if state["journal"] is not None and is_regular(folder / JOURNAL):  # our own swap, not committed
            with contextlib.suppress(Exception):
                roll_back(folder, state["journal"])
                state["journal"] = None
        raise
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for name, made in ((BACKUP_PARTIAL, state["partial"]), (BACKUP, state["backup"] and state["journal"] is None)):
            if made:  # only what this run made, and the backup only once nothing needs it
                shutil.rmtree(folder / name, ignore_errors=True)
        for made in created:  # only when empty: a failed first export leaves no empty folders
            with contextlib.suppress(OSError):
                made.rmdir()
