"""Looking at a pickle before anything in it is built.

* ``check_torch_pickle``: the globals a ``torch.save`` file refers to, read from its opcodes without
  unpickling anything. ``torch.load(weights_only=True)`` already refuses code, but it still builds
  what it allows: a ``bytearray(2**31)`` from a 33 KB file, a sparse, meta or quantized tensor. Only
  plain tensors (``_rebuild_tensor_v2``, ``_rebuild_parameter``), their storages and ``OrderedDict``
  are let through to it.
* ``read_plain_pickle``: a pickle that holds only plain data (nanoGPT's ``meta.pkl``), built by an
  unpickler that refuses every class and function, then checked in time linear in its size (shared
  references are visited once).
"""

from __future__ import annotations

import io
import pickle
import pickletools
import time
import zipfile
from pathlib import Path
from typing import Any

from explorer.core.checkpoint.validate import read_capped, why
from explorer.core.errors import CheckpointError
from explorer.core.text import shown

MAX_PICKLE_BYTES = 64 * 2**20  # the pickled structure of a torch file (its tensors' data lie beside it)
MAX_PICKLE_SECONDS = 10.0  # reading the opcodes of a real state dict's structure takes well under a second
MAX_INFLATION = 64  # a deflated data.pkl this many times its compressed size is a decompression bomb
MAX_META_BYTES = 64 * 2**20
_PLAIN = (str, int, float, bool, bytes, type(None))
_STORAGES = {f"{kind}Storage" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char",
                                            "Byte", "Bool")}
ALLOWED_GLOBALS = ({("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
                    ("collections", "OrderedDict"), ("torch", "UntypedStorage")}
                   | {("torch", name) for name in _STORAGES})


def _globals(data: bytes | io.BufferedReader, found: list[tuple[str, str]],
             limit: int = MAX_PICKLE_BYTES) -> list[tuple[str, str]]:
    """(module, name) of every GLOBAL / STACK_GLOBAL in a pickle, following the memo for the names, added to
    ``found`` as they come (so a damaged pickle still shows what it referred to before the damage). Bounded:
    a pickle running past ``limit`` bytes or ``MAX_PICKLE_SECONDS`` is refused, naming what it is made of."""
    pushed, memo = [], {}
    counts: dict[str, int] = {}
    start = getattr(data, "tell", lambda: 0)()
    deadline = time.monotonic() + MAX_PICKLE_SECONDS
    try:
        for n, (op, arg, pos) in enumerate(pickletools.genops(data)):
            name = op.name
            counts[name] = counts.get(name, 0) + 1
            if (pos or 0) - start > limit or (n & 0xFFFF == 0xFFFF and time.monotonic() > deadline):
                top = sorted(counts.items(), key=lambda kv: -kv[1])[:2]
                made = " and ".join(f"{k} ({v:,})" for k, v in top)
                raise CheckpointError(f"its pickle goes on past {(pos or 0) - start:,} bytes and {n + 1:,} opcodes, "
                                      f"mostly {made}: not the structure of a state dict")
            if name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
                found.append((module, attr))
                pushed.append(None)
            elif name == "STACK_GLOBAL":
                module, attr = (pushed[-2], pushed[-1]) if len(pushed) >= 2 else (None, None)
                pushed = pushed[:-2]
                if not isinstance(module, str) or not isinstance(attr, str):
                    found.append(("?", "a name built at run time"))
                else:
                    found.append((module, attr))
                pushed.append(None)
            elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
                          "BINSTRING", "STRING"):
                pushed.append(arg)
            elif name == "MEMOIZE":
                memo[len(memo)] = pushed[-1] if pushed else None
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = pushed[-1] if pushed else None
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(int(arg)))
            elif name == "POP" and pushed:
                pushed.pop()
            elif op.stack_after:
                pushed.append(None)
            if name == "STOP":
                break
    except (ValueError, EOFError, IndexError, KeyError) as exc:
        raise CheckpointError(f"its pickle is damaged ({shown(exc)})") from None
    return found


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A zip member read in pieces, never past ``MAX_PICKLE_BYTES`` nor ``MAX_INFLATION`` times its
    compressed size, whatever its header claims."""
    limit = MAX_PICKLE_BYTES
    if info.compress_type != zipfile.ZIP_STORED:
        limit = min(limit, max(2**20, MAX_INFLATION * info.compress_size))
    out = bytearray()
    with archive.open(info) as member:
        while len(out) <= limit:
            piece = member.read(2**20)
            if not piece:
                return bytes(out)
            out += piece
    raise CheckpointError(f"its data.pkl inflates past {limit:,} bytes from {info.compress_size:,} compressed: "
                          "not the structure of a state dict (a decompression bomb)")


def _torch_globals(path: Path, found: list[tuple[str, str]]) -> None:
    """The globals of a ``torch.save`` file's pickle: ``data.pkl`` of the zip format, or the legacy file's head."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")
                     or info.filename == "data.pkl"]
            if len(names) != 1:
                raise CheckpointError("it is a zip archive without exactly one data.pkl: not a torch.save file")
            if names[0].file_size > MAX_PICKLE_BYTES:
                raise CheckpointError(f"its data.pkl is {names[0].file_size:,} bytes; a state dict's structure is "
                                      "far smaller")
            _globals(_read_member(archive, names[0]), found)
            return
    with open(path, "rb") as f:  # legacy format: magic, protocol, sys info, the object; then raw storages
        for _ in range(4):
            _globals(f, found, MAX_PICKLE_BYTES - f.tell())
            if f.tell() > MAX_PICKLE_BYTES:
                raise CheckpointError("its pickled structure is larger than any state dict's")


def check_torch_pickle(path: Path) -> None:
    """Refuse a torch file whose pickle builds anything but plain tensors, storages and containers."""
    found: list[tuple[str, str]] = []
    damage = None
    try:
        _torch_globals(path, found)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError) as exc:
        raise CheckpointError(f"cannot read {shown(path)} ({shown(why(exc))})") from None
    except CheckpointError as exc:
        damage = exc
    for module, name in found:
        if (module, name) not in ALLOWED_GLOBALS:
            what = {"bytearray": "a byte array", "_rebuild_sparse_tensor": "a sparse tensor",
                    "_rebuild_meta_tensor_no_storage": "a meta tensor", "_rebuild_qtensor": "a quantized tensor"}
            if name in what:
                raise CheckpointError(f"refused to load {path}: it builds {what[name]}; only plain tensors and "
                                      "containers are read from a torch file")
            raise CheckpointError(f"refused to load {shown(path)}: it refers to {shown(module)}.{shown(name)}, so loading it could run "
                                  "code; only plain tensors and containers are read from a torch file")
    if damage is not None:
        raise CheckpointError(f"refused to load {shown(path)}: {damage}")




# --- plain-data pickles -------------------------------------------------------------------------

class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only the containers and primitives that pickle encodes natively; every class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it refers to {module}.{name}; only plain data (dicts, lists, strings, "
                                     "numbers) is accepted")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it refers to external objects; only plain data is accepted")


def is_plain(obj: Any, max_depth: int = 32) -> bool:
    """Only dicts, lists, tuples and primitives, nested at most ``max_depth`` deep; each object visited once."""
    seen: set[int] = set()
    stack = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _PLAIN):
            continue
        if depth > max_depth or not isinstance(item, (list, tuple, dict)):
            return False
        if id(item) in seen:
            continue
        seen.add(id(item))
        children = [x for kv in item.items() for x in kv] if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return True


def read_plain_pickle(path: Path) -> Any:
    """Unpickle ``path`` without importing or calling anything; ``CheckpointError`` if it needs more."""
    raw = read_capped(path, MAX_META_BYTES, "a vocabulary file")
    try:
        data = _PlainDataUnpickler(io.BytesIO(raw)).load()
    except RecursionError:
        raise CheckpointError(f"refused to read {path}: it is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - anything the unpickler raises means: refused
        raise CheckpointError(f"refused to read {path.name}: {exc}. Only plain data is read from a pickle, "
                              "so no code in it can run") from None
    if not is_plain(data):
        raise CheckpointError(f"refused to read {path.name}: it holds objects other than plain data, or is nested "
                              "too deeply")
    return data
