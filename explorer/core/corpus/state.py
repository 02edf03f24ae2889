"""A corpus run's accumulators and the database: loaded when a run resumes, saved after every batch.

The saved state is the whole state: a resumed run holds exactly what the stopped one held after
its last committed batch (float64 sums bit for bit), so it ends with the same database as a run
that never stopped. What changed in a batch is written in one transaction with the batch's windows
and the place the stream continues; a crash between two commits loses only the batch under way.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import numpy as np
import torch

from explorer.core.analysis.head_sums import NAMES
from explorer.core.corpus import store
from explorer.core.corpus.accumulate import N_BINS, HeadStats, UnitStats
from explorer.core.corpus.units import Group
from explorer.core.corpus.windows import Batch, Resume


class RunState:
    """Every group's ``UnitStats`` (made on the device its layer runs on, when first needed) and the heads."""

    def __init__(self, groups: list[Group], k: int, heads: tuple[int, int] | None, causal: bool,
                 con: sqlite3.Connection | None = None) -> None:
        self.groups = {(g.source, g.layer): g for g in groups}
        self.k = k
        self.units: dict[tuple[str, int], UnitStats] = {}
        self._saved: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        saved_pairs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if con is not None:
            for group in groups:
                saved = _load_group(con, group, k)
                if saved is not None:
                    self._saved[group.source, group.layer] = saved
        self.heads = None
        if heads is not None:
            n_layers, n_heads = heads
            if con is not None:
                saved_pairs = {layer: arrays for layer in range(n_layers)
                               if (arrays := _load_top(con, "heads", layer, n_heads, k)) is not None}
            self.heads = HeadStats(n_layers, n_heads, k, causal, saved_pairs)
            if con is not None:
                _load_heads(con, self.heads)

    def unit(self, source: str, layer: int, device: torch.device) -> UnitStats:
        key = (source, layer)
        stats = self.units.get(key)
        if stats is None:
            stats = self.units[key] = UnitStats(self.groups[key].units, self.k, device, self._saved.pop(key, None))
        return stats

    def snapshot(self, batch: Batch, token_dtype: str, progress: dict[str, Any]) -> dict[str, Any]:
        """Host copies of what this batch changed (the accumulators go on changing on the device), for ``write``."""
        top, stats = [], []
        for (source, layer), unit in self.units.items():
            top.append(_changed(source, layer, unit.top))
            # copies: on the CPU .cpu() is the accumulator itself, which the next batch adds to while this is written
            stats.append((source, layer, *(t.to("cpu", copy=True).numpy() for t in (unit.total, unit.total_sq, unit.hist))))
        heads, chance = [], []
        if self.heads is not None:
            h = self.heads
            top += [_changed("heads", layer, pairs) for layer, pairs in h.pairs.items()]
            heads = [(layer, h.sums[layer].copy(), h.counts[layer].copy()) for layer in range(h.n_layers)]
            chance = [(name, float(h.chance_sums[s]), int(h.chance_counts[s])) for s, name in enumerate(NAMES)]
        return {"batch": batch, "dtype": token_dtype, "top": [t for t in top if t is not None], "stats": stats,
                "heads": heads, "chance": chance, "progress": dict(progress)}


def write(con: sqlite3.Connection, commit: dict[str, Any]) -> None:
    """A ``snapshot`` to the database: the batch's windows and documents, what changed, where to continue, in one
    transaction (all or nothing)."""
    batch = commit["batch"]
    windows = store.window_rows(batch.first_window, batch.ids, batch.doc, batch.pos, commit["dtype"])
    top = [row for args in commit["top"] for row in store.top_rows(*args)]
    stats = [(s, layer, store.blob(t, "float64"), store.blob(q, "float64"), store.blob(h, "int64"))
             for s, layer, t, q, h in commit["stats"]]
    heads = [(layer, store.blob(s, "float64"), store.blob(c, "int64")) for layer, s, c in commit["heads"]]
    try:
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT OR REPLACE INTO windows VALUES (?, ?, ?)", windows)
        con.executemany("INSERT OR IGNORE INTO documents VALUES (?, ?)", batch.documents)
        con.executemany("INSERT OR REPLACE INTO top VALUES (?, ?, ?, ?, ?)", top)
        con.executemany("INSERT OR REPLACE INTO stats VALUES (?, ?, ?, ?, ?)", stats)
        con.executemany("INSERT OR REPLACE INTO heads VALUES (?, ?, ?)", heads)
        con.executemany("INSERT OR REPLACE INTO chance VALUES (?, ?, ?)", commit["chance"])
        save_progress(con, commit["progress"])
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


class Writer:
    """Commits on a thread of its own, one at a time, while the model computes the next batch: ``submit`` waits for
    the previous commit first, ``wait`` for the last (and raises what a commit raised)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, commit: dict[str, Any]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(commit,), name="corpus-commit", daemon=True)
        self._thread.start()

    def _write(self, commit: dict[str, Any]) -> None:
        try:
            write(self.con, commit)
        except BaseException as exc:  # noqa: BLE001 - handed to the run's thread by wait()
            self._error = exc

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error


def save_progress(con: sqlite3.Connection, progress: dict[str, Any]) -> None:
    import json

    resume = progress["resume"]
    con.execute("INSERT OR REPLACE INTO progress VALUES (0, ?, ?, ?, ?, ?, ?)",
                (progress["tokens"], progress["windows"], progress["batches"], progress["seconds"],
                 json.dumps(resume.to_json() if isinstance(resume, Resume) else resume), int(progress["done"])))


def load_progress(con: sqlite3.Connection) -> dict[str, Any] | None:
    import json

    row = con.execute("SELECT tokens, windows, batches, seconds, resume, done FROM progress").fetchone()
    if row is None:
        return None
    resume = json.loads(row[4])
    return {"tokens": row[0], "windows": row[1], "batches": row[2], "seconds": row[3],
            "resume": Resume.from_json(resume) if resume else None, "done": bool(row[5])}


def _changed(source: str, layer: int, top: Any) -> tuple | None:
    """(source, layer, units, values, ids) of the rows whose top list changed since the last call, or None."""
    rows = torch.nonzero(top.changed).flatten()
    top.changed.zero_()
    if len(rows) == 0:
        return None
    return source, layer, rows.cpu().numpy(), top.values[rows].cpu().numpy(), top.ids[rows].cpu().numpy()


def _load_top(con: sqlite3.Connection, source: str, layer: int, units: int, k: int
              ) -> tuple[np.ndarray, np.ndarray] | None:
    rows = con.execute("SELECT unit, vals, ids FROM top WHERE source = ? AND layer = ?", (source, layer)).fetchall()
    if not rows:
        return None
    values = np.full((units, k), -np.inf, np.float32)
    ids = np.full((units, k), -1, np.int64)
    for unit, v, i in rows:
        values[unit], ids[unit] = store.array(v, "float32"), store.array(i, "int64")
    return values, ids


def _load_group(con: sqlite3.Connection, group: Group, k: int) -> dict[str, np.ndarray] | None:
    row = con.execute("SELECT total, total_sq, hist FROM stats WHERE source = ? AND layer = ?",
                      (group.source, group.layer)).fetchone()
    if row is None:
        return None
    values, ids = _load_top(con, group.source, group.layer, group.units, k) or (
        np.full((group.units, k), -np.inf, np.float32), np.full((group.units, k), -1, np.int64))
    return {"values": values, "ids": ids, "total": store.array(row[0], "float64"),
            "total_sq": store.array(row[1], "float64"), "hist": store.array(row[2], "int64", (group.units, N_BINS))}


def _load_heads(con: sqlite3.Connection, heads: HeadStats) -> None:
    shape = (len(NAMES), heads.n_heads)
    for layer, sums, counts in con.execute("SELECT layer, sums, counts FROM heads"):
        heads.sums[layer] = store.array(sums, "float64", shape)
        heads.counts[layer] = store.array(counts, "int64", shape)
    for name, total, windows in con.execute("SELECT stat, total, windows FROM chance"):
        s = NAMES.index(name)
        heads.chance_sums[s], heads.chance_counts[s] = total, windows
