"""A corpus run's accumulators and the database: loaded when a run resumes, saved after every batch.

The saved state is the whole state: a resumed run holds exactly what the stopped one held after
its last committed batch (float64 sums bit for bit), so it ends with the same database as a run
that never stopped. What changed in a batch is written in one transaction with the batch's windows
and the place the stream continues; a crash between two commits loses only the batch under way.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import torch

from explorer.core.analysis.attention import NAMES
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

    def save(self, con: sqlite3.Connection, batch: Batch, token_dtype: str, progress: dict[str, Any]) -> None:
        """Write the batch's windows and documents, what changed, and where to continue: one transaction."""
        rows_top, rows_stats = [], []
        for (source, layer), stats in self.units.items():
            rows_top += _changed(source, layer, stats.top)
            rows_stats.append((source, layer, store.blob(stats.total.cpu().numpy(), "float64"),
                               store.blob(stats.total_sq.cpu().numpy(), "float64"),
                               store.blob(stats.hist.cpu().numpy(), "int64")))
        rows_heads, rows_chance = [], []
        if self.heads is not None:
            h = self.heads
            for layer, top in h.pairs.items():
                rows_top += _changed("heads", layer, top)
            rows_heads = [(layer, store.blob(h.sums[layer], "float64"), store.blob(h.counts[layer], "int64"))
                          for layer in range(h.n_layers)]
            rows_chance = [(name, float(h.chance_sums[s]), int(h.chance_counts[s])) for s, name in enumerate(NAMES)]
        windows = store.window_rows(batch.first_window, batch.ids, batch.doc, batch.pos, token_dtype)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany("INSERT OR REPLACE INTO windows VALUES (?, ?, ?)", windows)
            con.executemany("INSERT OR IGNORE INTO documents VALUES (?, ?)", batch.documents)
            con.executemany("INSERT OR REPLACE INTO top VALUES (?, ?, ?, ?, ?)", rows_top)
            con.executemany("INSERT OR REPLACE INTO stats VALUES (?, ?, ?, ?, ?)", rows_stats)
            con.executemany("INSERT OR REPLACE INTO heads VALUES (?, ?, ?)", rows_heads)
            con.executemany("INSERT OR REPLACE INTO chance VALUES (?, ?, ?)", rows_chance)
            save_progress(con, progress)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        for stats in self.units.values():
            stats.top.changed.zero_()
        if self.heads is not None:
            for top in self.heads.pairs.values():
                top.changed.zero_()


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


def _changed(source: str, layer: int, top: Any) -> list[tuple]:
    rows = torch.nonzero(top.changed).flatten()
    if len(rows) == 0:
        return []
    return store.top_rows(source, layer, rows.cpu().numpy(), top.values[rows].cpu().numpy(),
                          top.ids[rows].cpu().numpy())


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
