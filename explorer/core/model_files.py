"""Which files a model comes from, and their content hash: what a saved session and an export name.

``model_files(source)`` lists the files the loader reads for ``source`` (a checkpoint directory's
config, tokenizer and weight files; a GGUF or nanoGPT file itself; a Hugging Face cache id's snapshot;
an Ollama or LM Studio name's file; a built-in name's bundled folder). ``fingerprint`` hashes them:
SHA-256 of every byte, streamed a megabyte at a time (a ``progress`` callback hears about it), so two
copies of a model match wherever they lie and any changed byte is a different model.

Why the whole content, not headers and sizes: a fine-tune or a re-quantisation can keep every size,
shape and name, and a session reopened on it would show other numbers under the same name. Why it is
still cheap: each file's digest is kept, in this process, with its size, modification time and inode,
and a saved ``Fingerprint`` carries each file's size and modification time. A file whose stamp is
unchanged is not read again (git's index makes the same bet); a file touched, copied or moved is
hashed again and compared by content. ``same_model`` says which file changed, in one line.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from explorer.core.cancel import CancelLike, checker

CHUNK = 1 << 20
SKIPPED_SUFFIXES = (".md", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".lock")  # a model card, pictures
Progress = Callable[[int, int], None]  # bytes hashed so far, bytes in all

_digests: dict[tuple, str] = {}  # (path, size, mtime_ns, inode) -> sha256, this process's
_lock = threading.Lock()


@dataclass(frozen=True)
class FileStamp:
    name: str        # the file's name inside the model (relative to its folder)
    size: int
    mtime_ns: int
    sha256: str      # "" when not hashed yet (``fingerprint(read=False)``)


@dataclass(frozen=True)
class Fingerprint:
    """The model's files and their content; ``digest`` is one hash of them all (names and contents)."""

    files: tuple[FileStamp, ...]

    @property
    def complete(self) -> bool:
        return all(f.sha256 for f in self.files)

    @property
    def digest(self) -> str | None:
        """One SHA-256 of the files' names, sizes and contents (None while a file is not hashed yet)."""
        if not self.complete:
            return None
        lines = "".join(f"{f.name}\0{f.size}\0{f.sha256}\n" for f in sorted(self.files, key=lambda f: f.name))
        return hashlib.sha256(lines.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        return {"sha256": self.digest, "files": [asdict(f) for f in self.files]}


def model_files(source: str | os.PathLike[str]) -> list[Path]:
    """The files the loader reads for ``source``; [] for a model that has none (held in memory, built in code)."""
    from explorer.core import worked_example
    from explorer.core.checkpoint import hub_cache, local_stores
    from explorer.core.checkpoint.gguf_validate import is_gguf
    from explorer.core.checkpoint.nanogpt import SUFFIXES
    from explorer.core.paths import models_dir

    text = str(source)
    if text.startswith("memory:") or text == worked_example.NAME:
        return []
    path = Path(text).expanduser()
    if not path.exists() and (models_dir() / text).is_dir():
        path = models_dir() / text
    if not path.exists():
        local = local_stores.resolve(text)
        if local is not None:
            return [local.path]
        cached = hub_cache.resolve(text)
        if cached is None:
            return []
        path = cached.path
    if path.is_file() and (path.suffix.lower() == ".gguf" or path.suffix in SUFFIXES or is_gguf(path)):
        return [path]
    folder = path if path.is_dir() else path.parent
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and not p.name.lower().endswith(SKIPPED_SUFFIXES))


def _stamp_key(path: Path, stat: os.stat_result) -> tuple:
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _sha256(path: Path, done: int, total: int, progress: Progress | None, check: Callable[[], None]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
            check()
    return digest.hexdigest()


def fingerprint(source: str | os.PathLike[str], progress: Progress | None = None, cancel: CancelLike = None,
                known: Fingerprint | None = None, read: bool = True) -> Fingerprint | None:
    """The content hash of ``source``'s files (None: it has none). A file whose size and modification time
    equal ``known``'s entry for it (or this process's last hash of it) keeps that hash unread. ``read=False``:
    read nothing (on the GUI thread): a file not hashed before has ``sha256 == ""``."""
    files = model_files(source)
    if not files:
        return None
    root = files[0].parent
    check = checker(cancel)
    stats = [(p, p.stat()) for p in files]
    saved = {f.name: f for f in known.files} if known is not None else {}
    todo = []
    stamps: dict[Path, FileStamp] = {}
    for p, st in stats:
        name = p.name if p.parent == root else str(p.relative_to(root))
        with _lock:
            cached = _digests.get(_stamp_key(p, st))
        old = saved.get(name)
        if cached is None and old is not None and (old.size, old.mtime_ns) == (st.st_size, st.st_mtime_ns):
            cached = old.sha256
        if cached is not None:
            stamps[p] = FileStamp(name, st.st_size, st.st_mtime_ns, cached)
        else:
            todo.append((p, st, name))
    if not read:
        stamps.update((p, FileStamp(name, st.st_size, st.st_mtime_ns, "")) for p, st, name in todo)
        todo = []
    total, done = sum(st.st_size for _, st, _ in todo), 0
    for p, st, name in todo:
        sha = _sha256(p, done, total, progress, check)
        done += st.st_size
        with _lock:
            _digests[_stamp_key(p, st)] = sha
        stamps[p] = FileStamp(name, st.st_size, st.st_mtime_ns, sha)
    return Fingerprint(tuple(stamps[p] for p, _ in stats))


def changed_files(saved: Fingerprint, now: Fingerprint | None) -> list[str]:
    """The names of the files that differ between ``saved`` and ``now`` (added, gone or other content)."""
    if now is None:
        return [f.name for f in saved.files]
    before = {f.name: f.sha256 for f in saved.files}  # a file not hashed ("") counts as changed
    after = {f.name: f.sha256 for f in now.files}
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def fingerprint_from(data: object) -> Fingerprint | None:
    """A ``Fingerprint`` from ``to_dict``'s form (a saved session's), or None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return None
    files = []
    for entry in data["files"]:
        if not isinstance(entry, dict):
            return None
        name, size, mtime, sha = (entry.get(k) for k in ("name", "size", "mtime_ns", "sha256"))
        if not (isinstance(name, str) and isinstance(size, int) and isinstance(mtime, int) and isinstance(sha, str)
                and len(sha) in (0, 64) and all(c in "0123456789abcdef" for c in sha)):
            return None
        files.append(FileStamp(name, size, mtime, sha))
    return Fingerprint(tuple(files))
