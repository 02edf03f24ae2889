"""Reading a corpus as a stream of text pieces that can be restarted anywhere (no torch, no Qt).

A corpus is a text file (one document), a folder of them (every ``.txt``, ``.md``, ``.rst``, ``.jsonl``,
``.ndjson`` and ``.parquet`` file under it, in path order; each may end in ``.gz`` except Parquet),
JSON Lines (one document per line, its text in a field, ``text`` by default), Parquet (the same field
of every row; needs pyarrow, the ``parquet`` extra) or the bundled sample (``"sample"``).

Documents are cut into pieces of at most ``CHUNK_BYTES`` (at a newline or a space when there is
one), so a 10 GB line is read a megabyte at a time. Each piece carries where it starts (``Where``):
reading again from there gives the same pieces, which is how a stopped run resumes without reading
what it has done. Text must be UTF-8: an invalid byte, a NUL byte (a binary file), a JSON line over
``MAX_LINE_BYTES`` or without its text field stops the run with one line naming the file and place.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.paths import resources_dir
from explorer.core.text import shown

SAMPLE = "sample"
CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 20
TEXT = (".txt", ".md", ".rst", ".text")
JSONL = (".jsonl", ".ndjson")
PARQUET = ".parquet"
PARQUET_HINT = "reading Parquet needs pyarrow: pip install 'transformer-explorer[parquet]'"


class CorpusError(ExplorerError):
    """A corpus that cannot be read (a missing file, not UTF-8, binary, a broken JSON line): one line."""


def sample_path() -> Path:
    """The bundled sample corpus (resources/corpus/, its sources and licences in its README)."""
    return resources_dir() / "corpus" / "sample.jsonl.gz"


@dataclass(frozen=True)
class Where:
    """Where a piece starts: the file's index, the byte offset of its text (a JSON line's start, or the
    row of a Parquet file), the line number, the piece's index within that line or row, and the document's
    number in the corpus."""

    file: int = 0
    offset: int = 0
    line: int = 0
    chunk: int = 0
    doc: int = 0

    def as_list(self) -> list[int]:
        return [self.file, self.offset, self.line, self.chunk, self.doc]


@dataclass(frozen=True)
class Piece:
    text: str
    where: Where
    name: str          # the document's name: a file's path, "file.jsonl:17" for a line
    first: bool        # the document's first piece
    last: bool         # its last piece (an end-of-text token follows it)
    fraction: float    # about how much of the corpus lies before this piece (0..1)


def _kind(path: Path) -> str | None:
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in TEXT:
        return "text"
    if last in JSONL:
        return "jsonl"
    if last == PARQUET and path.suffix.lower() == PARQUET:
        return "parquet"
    return None


class Corpus:
    """The files of a corpus and how to read them (see the module docstring)."""

    def __init__(self, spec: str | os.PathLike[str], text_field: str = "text") -> None:
        self.text_field = text_field
        self.skipped = 0  # a folder's files of other kinds
        if str(spec) == SAMPLE:
            path = sample_path()
            self.name = "sample"
        else:
            path = Path(spec).expanduser()
            self.name = path.name.split(".")[0] or "corpus"
        if not path.exists():
            raise CorpusError(f"no corpus at {shown(str(path), 200)}")
        if path.is_dir():
            found = sorted((p for p in path.rglob("*") if p.is_file() and not any(
                part.startswith(".") for part in p.relative_to(path).parts)), key=lambda p: p.as_posix())
            self.files = [(p, k) for p in found if (k := _kind(p)) is not None]
            self.skipped = len(found) - len(self.files)
            self.root = path
            if not self.files:
                raise CorpusError(f"{shown(str(path), 200)} holds no .txt, .md, .jsonl or .parquet files")
        else:
            kind = _kind(path) or "text"
            self.files = [(path, kind)]
            self.root = path.parent
        self.sizes = [p.stat().st_size for p, _ in self.files]
        self._total = max(1, sum(self.sizes))
        if any(k == "parquet" for _, k in self.files):
            _pyarrow()

    def label(self, index: int) -> str:
        return self.files[index][0].relative_to(self.root).as_posix()

    def fingerprint(self) -> str:
        """A content fingerprint: sha256 over every file's name, size and first and last 64 KiB (not the whole
        corpus: a 10 GB corpus is not read twice)."""
        h = hashlib.sha256(self.text_field.encode())
        for i, (path, _) in enumerate(self.files):
            h.update(f"{self.label(i)}\0{self.sizes[i]}\0".encode())
            with open(path, "rb") as f:
                h.update(f.read(65536))
                if self.sizes[i] > 65536:
                    f.seek(max(65536, self.sizes[i] - 65536))
                    h.update(f.read(65536))
        return h.hexdigest()

    def pieces(self, start: Where = Where()) -> Iterator[Piece]:
        """Every piece from ``start`` on, in order."""
        doc = start.doc
        for index in range(start.file, len(self.files)):
            at = start if index == start.file else Where(index, 0, 0, 0, doc)
            reader = {"text": self._text, "jsonl": self._jsonl, "parquet": self._parquet}[self.files[index][1]]
            for piece in reader(index, Where(index, at.offset, at.line, at.chunk, doc)):
                yield piece
                if piece.last:
                    doc = piece.where.doc + 1

    def _fraction(self, index: int, within: float) -> float:
        return (sum(self.sizes[:index]) + within * self.sizes[index]) / self._total

    def _open(self, index: int) -> tuple[Any, Any]:
        path = self.files[index][0]
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
        return raw, (gzip.GzipFile(fileobj=raw) if path.suffix.lower() == ".gz" else raw)

    def _text(self, index: int, at: Where) -> Iterator[Piece]:
        raw, f = self._open(index)
        with raw, f:
            name = self.label(index)
            f.seek(at.offset)
            for offset, data, last in _chunks(f, at.offset):
                text = _decode(data, name, offset)
                fraction = self._fraction(index, raw.tell() / max(1, self.sizes[index]))
                yield Piece(text, Where(index, offset, 0, 0, at.doc), name, offset == 0, last, min(1.0, fraction))

    def _jsonl(self, index: int, at: Where) -> Iterator[Piece]:
        raw, f = self._open(index)
        with raw, f:
            f.seek(at.offset)
            offset, line_no, doc, skip = at.offset, at.line, at.doc, at.chunk
            while True:
                line = f.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                name = f"{self.label(index)}:{line_no + 1}"
                if len(line) > MAX_LINE_BYTES:
                    raise CorpusError(f"{shown(name, 200)}: a line longer than {MAX_LINE_BYTES >> 20} MB")
                text = _json_text(_decode(line, name, offset), name, self.text_field) if line.strip() else ""
                parts = _split(text)
                fraction = min(1.0, self._fraction(index, raw.tell() / max(1, self.sizes[index])))
                for chunk in range(skip, len(parts)):
                    yield Piece(parts[chunk], Where(index, offset, line_no, chunk, doc), name, chunk == 0,
                                chunk == len(parts) - 1, fraction)
                doc += bool(parts)
                offset, line_no, skip = offset + len(line), line_no + 1, 0

    def _parquet(self, index: int, at: Where) -> Iterator[Piece]:
        pq = _pyarrow()
        path = self.files[index][0]
        try:
            file = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow's own errors: one line
            raise CorpusError(f"{shown(self.label(index), 200)} is not a readable Parquet file ({exc})") from None
        if self.text_field not in file.schema_arrow.names:
            raise CorpusError(f"{shown(self.label(index), 200)} has no column {self.text_field!r} "
                              f"(columns: {', '.join(file.schema_arrow.names[:8])})")
        total = max(1, file.metadata.num_rows)
        row, doc, skip = 0, at.doc, at.chunk
        for group in range(file.num_row_groups):
            rows = file.metadata.row_group(group).num_rows
            if row + rows <= at.offset:
                row += rows
                continue
            column = file.read_row_group(group, columns=[self.text_field]).column(0).to_pylist()
            for value in column:
                if row >= at.offset:
                    name = f"{self.label(index)}:row {row}"
                    if value is not None and not isinstance(value, str):
                        raise CorpusError(f"{shown(name, 200)}: {self.text_field!r} is not text")
                    parts = _split(value or "")
                    for chunk in range(skip, len(parts)):
                        yield Piece(parts[chunk], Where(index, row, 0, chunk, doc), name, chunk == 0,
                                    chunk == len(parts) - 1, self._fraction(index, row / total))
                    doc += bool(parts)
                    skip = 0
                row += 1


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(PARQUET_HINT) from None
    return pq


def _cut(buf: bytes, limit: int) -> int:
    """Where to end a piece of at most ``limit`` bytes: after the last newline, else the last space,
    else at a UTF-8 character boundary."""
    for sep in (b"\n", b" "):
        at = buf.rfind(sep, 0, limit)
        if at > 0:
            return at + 1
    cut = limit
    while cut > 1 and buf[cut] & 0xC0 == 0x80:  # a continuation byte: not a character's start
        cut -= 1
    return cut


def _chunks(f: io.BufferedIOBase, offset: int) -> Iterator[tuple[int, bytes, bool]]:
    buf, eof = b"", False
    while True:
        while not eof and len(buf) <= CHUNK_BYTES:
            more = f.read(CHUNK_BYTES)
            eof = not more
            buf += more
        if not buf:
            return
        cut = _cut(buf, CHUNK_BYTES) if len(buf) > CHUNK_BYTES else len(buf)
        piece, buf = buf[:cut], buf[cut:]
        yield offset, piece, eof and not buf
        offset += len(piece)


def _decode(data: bytes, name: str, offset: int) -> str:
    nul = data.find(b"\x00")
    if nul >= 0:
        raise CorpusError(f"{shown(name, 200)} looks binary, not text (a NUL byte at byte {offset + nul:,})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{shown(name, 200)} is not UTF-8 text (an invalid byte at byte {offset + exc.start:,})") \
            from None


def _json_text(line: str, name: str, field: str) -> str:
    try:
        obj = json.loads(line)
    except ValueError:
        raise CorpusError(f"{shown(name, 200)} is not a JSON object") from None
    if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
        raise CorpusError(f"{shown(name, 200)} has no {field!r} text field")
    return obj[field]


def _split(text: str) -> list[str]:
    """A document's text in pieces of at most about ``CHUNK_BYTES`` characters, cut at whitespace."""
    parts, start = [], 0
    while len(text) - start > CHUNK_BYTES:
        end = start + CHUNK_BYTES
        at = max(text.rfind("\n", start + 1, end), text.rfind(" ", start + 1, end))
        end = at + 1 if at > start else end
        parts.append(text[start:end])
        start = end
    if start < len(text):
        parts.append(text[start:])
    return parts
