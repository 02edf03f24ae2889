"""The database of a corpus run: one SQLite file (stdlib sqlite3, WAL), written a batch per transaction.

Tables (arrays are little-endian numpy bytes in BLOBs):

==============  ===============================================================================
``meta``        key -> JSON: format, model / corpus / SAE names and fingerprints, window, k, skip,
                the sources and their groups, the heads' shape, the histogram's edges
``progress``    one row: tokens and windows done, batches, seconds, where the stream continues, done
``documents``   doc -> name (a file, "file.jsonl:17")
``windows``     window -> its token ids, and where its documents start (offset, doc, position) triples
``vocab``       token id -> how it is shown, its bytes (so a run reads without the model)
``top``         (source, layer, unit) -> the top-k values (float32) and their ids (int64, best first):
                a unit's tokens (g = window * W + position), or a head's query/key pairs (source "heads")
``stats``       (source, layer) -> sums, sums of squares (float64 [units]), histograms (int64 [units, bins])
``heads``       layer -> window-score sums (float64 [stats, heads]) and defined-window counts (int64)
``chance``      statistic -> the sum of the windows' chance levels and their count
==============  ===============================================================================

Readers open it read-only and may do so while a run writes (WAL); a point read is an index look-up.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from explorer.core.corpus.reading import CorpusError
from explorer.core.text import shown

FORMAT = 1
BUSY_SECONDS = 10.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS progress (id INTEGER PRIMARY KEY CHECK (id = 0), tokens INTEGER, windows INTEGER,
    batches INTEGER, seconds REAL, resume TEXT, done INTEGER);
CREATE TABLE IF NOT EXISTS documents (doc INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS windows (window INTEGER PRIMARY KEY, tokens BLOB NOT NULL, docs BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, display TEXT NOT NULL, bytes BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS top (source TEXT, layer INTEGER, unit INTEGER, vals BLOB NOT NULL, ids BLOB NOT NULL,
    PRIMARY KEY (source, layer, unit)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats (source TEXT, layer INTEGER, total BLOB NOT NULL, total_sq BLOB NOT NULL,
    hist BLOB NOT NULL, PRIMARY KEY (source, layer)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS heads (layer INTEGER PRIMARY KEY, sums BLOB NOT NULL, counts BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS chance (stat TEXT PRIMARY KEY, total REAL NOT NULL, windows INTEGER NOT NULL);
"""
RESULT_TABLES = ("documents", "windows", "top", "stats", "heads", "chance")


def connect(path: str | Path, readonly: bool = False, timeout: float = BUSY_SECONDS) -> sqlite3.Connection:
    """A connection to a run's database: read-only (it must exist), or for writing (WAL, created if new)."""
    path = Path(path)
    try:
        if readonly:
            if not path.is_file():
                raise CorpusError(f"no corpus run at {shown(str(path), 200)}")
            con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout,
                                  check_same_thread=False)
        else:
            con = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
            tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:  # another program's database: never written into
                con.close()
                raise CorpusError(f"{shown(str(path), 200)} is a database of another program, not a corpus run: "
                                  "give another --out")
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            con.executescript(SCHEMA)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise database_error(exc, path) from None
    return con


def database_error(exc: sqlite3.Error, path: str | Path) -> CorpusError:
    """One line for what SQLite said about ``path``."""
    text = str(exc)
    name = shown(str(path), 200)
    if "locked" in text or "busy" in text:
        return CorpusError(f"{name} is locked by another program (another corpus run, or a tool writing it); "
                           "results written so far are kept")
    if "not a database" in text or "malformed" in text:
        return CorpusError(f"{name} is not a corpus run database (SQLite says: {text})")
    return CorpusError(f"{name}: {text}")


def blob(a: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def array(b: bytes, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.frombuffer(b, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    return a if shape is None else a.reshape(shape)


def read_meta(con: sqlite3.Connection) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in con.execute("SELECT key, value FROM meta")}


def write_meta(con: sqlite3.Connection, meta: dict[str, Any]) -> None:
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [(key, json.dumps(value, sort_keys=True)) for key, value in meta.items()])


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65536 else "int32"


def window_rows(first: int, ids: np.ndarray, docs: np.ndarray, pos: np.ndarray, dtype: str) -> list[tuple]:
    """Rows of ``windows`` for a batch: tokens, and (offset, doc, position) where each document starts."""
    rows = []
    for b in range(ids.shape[0]):
        starts = np.flatnonzero(np.r_[True, docs[b, 1:] != docs[b, :-1]])
        segments = np.stack([starts, docs[b, starts], pos[b, starts]], axis=1)
        rows.append((first + b, blob(ids[b], dtype), blob(segments, "int64")))
    return rows


def top_rows(source: str, layer: int, units: np.ndarray, values: np.ndarray, ids: np.ndarray) -> list[tuple]:
    return [(source, layer, int(u), blob(v, "float32"), blob(i, "int64")) for u, v, i in zip(units, values, ids)]


def write_vocab(con: sqlite3.Connection, tokenizer: Any, vocab_size: int) -> None:
    ids = list(range(vocab_size))
    try:
        shown_ = tokenizer.displays(ids)
    except Exception:  # noqa: BLE001 - a model's vocabulary larger than its tokenizer's
        shown_ = [_display(tokenizer, i) for i in ids]
    con.executemany("INSERT OR REPLACE INTO vocab VALUES (?, ?, ?)",
                    [(i, s, _bytes(tokenizer, i)) for i, s in zip(ids, shown_)])


def _display(tokenizer: Any, i: int) -> str:
    try:
        return tokenizer.display(i)
    except Exception:  # noqa: BLE001
        return f"<{i}>"


def _bytes(tokenizer: Any, i: int) -> bytes:
    try:
        return bytes(tokenizer.token_bytes(i))
    except Exception:  # noqa: BLE001 - special or unknown ids have no bytes
        return b""
