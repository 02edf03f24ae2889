"""A GGUF file's header, read and checked before anything is allocated.

``gguf.GGUFReader`` trusts the file: a count of 2**60 key/value pairs, a string length past the end,
a tensor whose offset lies beyond the file or whose shape overflows are all taken at their word.
``read_header`` is this project's own parser of the header (GGUF versions 2 and 3, little-endian):

* the magic, the version, the tensor and key/value counts against what the file's size can hold;
* every string's length against the bytes left (and a cap), every array's count against the bytes
  left (and a cap on items), nesting of arrays at most two deep, value types from the specification;
* every tensor: a unique name, 1 to 4 dimensions, each positive, the element count bounded, a type
  that ``gguf`` can dequantise, the first dimension a whole number of its blocks, the offset
  aligned, and its bytes inside the file, not overlapping another tensor's, and filling the room before
  the next one (a type changed to a smaller one would leave room the data does not explain).

Each problem is one ``CheckpointError`` line naming the file. The header is read from a memory map
(only the pages the header spans are touched); tensor data is not read here.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.core.checkpoint.validate import why
from explorer.core.errors import CheckpointError
from explorer.core.quant.dequant import TYPES  # ggml types gguf reads: (name, elements per block, bytes per block)

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_STRING = 64 * 2**20  # one metadata string (a chat template is tens of kB)
MAX_NAME = 256  # a tensor's name (ggml allows 64)
MAX_ITEMS = 2 * 2**20  # items of one metadata array (the largest vocabularies: ~262k tokens, fewer merges)
MAX_TOTAL_ITEMS = 8 * 2**20  # items of all metadata arrays together
MAX_ELEMENTS = 2**40  # elements of one tensor
MAX_DIMS = 4
# value type -> (struct format, size); 8 string, 9 array
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
            7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # as torch/numpy see it: the GGUF dimensions reversed (rows first)
    type_id: int
    start: int  # absolute byte offsets in the file
    end: int

    @property
    def type_name(self) -> str:
        return TYPES[self.type_id][0]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Header:
    path: Path
    version: int
    size: int  # the file's bytes
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0

    def tensor_types(self) -> dict[str, int]:
        """How many tensors each quantisation type has, most first."""
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.type_name] = counts.get(t.type_name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def is_gguf(path: Path) -> bool:
    """Whether a regular file starts with the GGUF magic (a FIFO or a device is never read)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


class _Cursor:
    """Reads little-endian values from the mapped header, every read checked against the file's end."""

    def __init__(self, buf: Any, path: Path, size: int) -> None:
        self.buf, self.path, self.size, self.pos = buf, path, size, 0
        self.items = 0  # metadata array items read so far

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.path} is not a valid GGUF file: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"{what} at byte {self.pos:,} runs past the end of the file ({self.size:,} bytes): "
                            "the file is truncated or damaged")

    def scalar(self, fmt: str, n: int, what: str) -> Any:
        self.need(n, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def string(self, what: str, cap: int = MAX_STRING) -> str:
        n = self.u64(f"the length of {what}")
        if n > cap:
            raise self.fail(f"{what} claims {n:,} bytes (at most {cap:,} are read)")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def value(self, type_id: int, what: str, depth: int = 0) -> Any:
        if type_id in _SCALARS:
            return self.scalar(*_SCALARS[type_id], what)
        if type_id == STRING:
            return self.string(what)
        if type_id == ARRAY:
            if depth >= 2:
                raise self.fail(f"{what} nests arrays more than two deep")
            item_type = self.u32(f"the item type of {what}")
            count = self.u64(f"the length of {what}")
            least = _SCALARS[item_type][1] if item_type in _SCALARS else 8 if item_type == STRING else 12
            if item_type not in _SCALARS and item_type not in (STRING, ARRAY):
                raise self.fail(f"{what} has items of unknown type {item_type}")
            if count > MAX_ITEMS or count * least > self.size - self.pos:
                raise self.fail(f"{what} claims {count:,} items, more than the file's remaining "
                                f"{self.size - self.pos:,} bytes can hold" if count <= MAX_ITEMS else
                                f"{what} claims {count:,} items (at most {MAX_ITEMS:,} are read)")
            self.items += count
            if self.items > MAX_TOTAL_ITEMS:
                raise self.fail(f"its metadata arrays hold over {MAX_TOTAL_ITEMS:,} items in all")
            if item_type in _SCALARS:  # one unpack for the whole array
                fmt, n = _SCALARS[item_type]
                self.need(n * count, what)
                values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += n * count
                return values
            return [self.value(item_type, what, depth + 1) for _ in range(count)]
        raise self.fail(f"{what} has unknown value type {type_id}")


def read_header(path: Path) -> Header:
    """The checked header of a GGUF file (see the module's description)."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CheckpointError(f"{path} is not a regular file")
            size = info.st_size
            if size < 24:
                raise CheckpointError(f"{path} is not a valid GGUF file: it has {size} bytes")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(buf, path, size)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path} ({why(exc)})") from None


def _parse(buf: Any, path: Path, size: int) -> Header:
    cur = _Cursor(buf, path, size)
    if bytes(buf[:4]) != MAGIC:
        raise cur.fail(f"it starts with {bytes(buf[:4])!r}, not {MAGIC!r}")
    cur.pos = 4
    version = cur.u32("the version")
    if version not in VERSIONS:
        raise cur.fail(f"version {version} (versions {' and '.join(map(str, VERSIONS))} are read)")
    n_tensors, n_kv = cur.u64("the tensor count"), cur.u64("the metadata count")
    if n_kv * 13 > size - cur.pos:  # a key/value pair takes at least 13 bytes
        raise cur.fail(f"it claims {n_kv:,} metadata entries, more than its {size:,} bytes can hold")
    if n_tensors * 24 > size - cur.pos:  # a tensor's description takes at least 24 bytes
        raise cur.fail(f"it claims {n_tensors:,} tensors, more than its {size:,} bytes can hold")
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}", MAX_NAME)
        if key in metadata:
            raise cur.fail(f"metadata key {key!r:.80} appears twice")
        metadata[key] = cur.value(cur.u32(f"the type of {key!r:.80}"), f"metadata {key!r:.80}")
    header = Header(path, version, size, metadata)
    names: set[str] = set()
    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}", MAX_NAME)
        if name in names:
            raise cur.fail(f"tensor {name!r:.80} appears twice")
        names.add(name)
        n_dims = cur.u32(f"the dimension count of {name!r:.80}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {name!r:.80} has {n_dims} dimensions (1 to {MAX_DIMS} are read)")
        dims = tuple(cur.u64(f"a dimension of {name!r:.80}") for _ in range(n_dims))
        type_id = cur.u32(f"the type of {name!r:.80}")
        offset = cur.u64(f"the offset of {name!r:.80}")
        raw.append((name, dims, type_id, offset))
    alignment = metadata.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or not 1 <= alignment <= 2**20 \
            or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment is {alignment!r:.40}, not a power of two")
    header.data_start = -(-cur.pos // alignment) * alignment
    for name, dims, type_id, offset in raw:
        header.tensors.append(_tensor(cur, header, name, dims, type_id, offset, alignment))
    spans = sorted(header.tensors, key=lambda t: t.start)
    for a, b in zip(spans, spans[1:]):
        if b.start < a.end:
            raise cur.fail(f"tensors {a.name!r:.80} and {b.name!r:.80} overlap in the file")
    _check_types_fill_their_room(cur, spans, size, alignment)
    return header


def _check_types_fill_their_room(cur: _Cursor, spans: list[TensorInfo], size: int, alignment: int) -> None:
    """Each tensor's bytes fill the room before the next tensor (GGUF writers pad only to the alignment): a
    type changed to a smaller one (F32 re-typed as F16 or Q8_0) leaves room its data does not explain, and
    would be read as other numbers. After the last tensor, a few trailing bytes are let pass."""
    for i, t in enumerate(spans):
        last = i + 1 == len(spans)
        room = (size if last else spans[i + 1].start) - t.start
        nbytes = t.end - t.start
        if room - nbytes >= alignment and (not last or room - nbytes >= nbytes // 2):
            raise cur.fail(f"tensor {t.name!r:.80} is stored as {TYPES[t.type_id][0]} ({nbytes:,} bytes) but "
                           f"{room:,} bytes lie before {'the end of the file' if last else 'the next tensor'}: its "
                           "type does not match its data (it would be read as other numbers)")


def _tensor(cur: _Cursor, header: Header, name: str, dims: tuple[int, ...], type_id: int, offset: int,
            alignment: int) -> TensorInfo:
    label = f"tensor {name!r:.80}"
    numel = 1
    for d in dims:
        if d == 0 or d > MAX_ELEMENTS:
            raise cur.fail(f"{label} has a dimension of {d:,}")
        numel *= d
        if numel > MAX_ELEMENTS:
            raise cur.fail(f"{label} has shape {tuple(reversed(dims))}, over {MAX_ELEMENTS:,} elements")
    if type_id not in TYPES:
        raise cur.fail(f"{label} has type {type_id}, which is not a weight type that can be dequantised "
                       f"({', '.join(v[0] for v in TYPES.values())} are)")
    kind, block, nbytes = TYPES[type_id]
    if dims[0] % block:
        raise cur.fail(f"{label} of type {kind} has rows of {dims[0]:,} elements, not a multiple of its "
                       f"{block}-element blocks")
    if offset % alignment:
        raise cur.fail(f"{label} starts at offset {offset:,}, not a multiple of the alignment {alignment}")
    start = header.data_start + offset
    end = start + numel // block * nbytes
    if end > header.size:
        raise cur.fail(f"{label} lies beyond the end of the file (byte {end:,} of {header.size:,}): "
                       "the file is truncated or damaged")
    return TensorInfo(name, tuple(reversed(dims)), type_id, start, end)
