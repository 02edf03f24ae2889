"""Two or more runs over different parts of one corpus (``--skip``) merged into one database.

The runs must share the model, corpus, SAE and settings and cover different windows. Top-k lists are
merged with the runs' own exact order (value, then the smaller id: tokens are numbered by their place
in the whole corpus, so ids from different parts never clash), sums, histograms, head sums and chance
sums are added: the merged database holds what one run over all the parts holds (its float64 sums up
to the order of addition).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from explorer.core.corpus import store
from explorer.core.corpus.reading import CorpusError
from explorer.core.corpus.state import load_progress, save_progress
from explorer.core.text import shown

_SAME = ("format", "model", "model_fingerprint", "corpus", "corpus_fingerprint", "sae", "sae_fingerprint", "window",
         "k", "vocab_size", "causal", "sources", "statistics", "heads", "bins")


def merge_top(values: list[np.ndarray], ids: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of several top-k lists [R, k] merged: the k best of each row by (value descending, id ascending)."""
    v, i = np.concatenate(values, axis=1), np.concatenate(ids, axis=1)
    v = np.where(i < 0, -np.inf, v)
    order = np.lexsort((i, -v.astype(np.float64)), axis=1)[:, :k]  # last key first: value, then id
    return np.take_along_axis(v, order, 1).astype(np.float32), np.take_along_axis(i, order, 1)


def merge_runs(inputs: list[str | Path], out: str | Path) -> Path:
    """Merge the runs ``inputs`` into the new database ``out`` (which must not exist)."""
    out = Path(out)
    if len(inputs) < 2:
        raise CorpusError("merge needs at least two runs")
    if out.exists():
        raise CorpusError(f"{shown(str(out), 200)} exists: merge writes a new file")
    cons = [store.connect(p, readonly=True) for p in inputs]
    try:
        metas = [store.read_meta(c) for c in cons]
        for path, meta in zip(inputs[1:], metas[1:]):
            differ = [key for key in _SAME if meta.get(key) != metas[0].get(key)]
            if differ:
                raise CorpusError(f"{shown(str(path), 200)} is a run with another {', '.join(differ)}: "
                                  "only runs of the same model, corpus, SAE and settings merge")
        seen: set[int] = set()
        for path, con in zip(inputs, cons):
            windows = {w for (w,) in con.execute("SELECT window FROM windows")}
            if windows & seen:
                raise CorpusError(f"{shown(str(path), 200)} covers windows another run covers: merge runs over "
                                  "different parts (--skip)")
            seen |= windows
        dest = store.connect(out)
        try:
            _merge(cons, metas, dest)
        except BaseException:
            dest.close()
            out.unlink(missing_ok=True)
            raise
        dest.close()
    except sqlite3.Error as exc:
        raise store.database_error(exc, out) from None
    finally:
        for con in cons:
            con.close()
    return out


def _merge(cons: list[sqlite3.Connection], metas: list[dict], dest: sqlite3.Connection) -> None:
    meta = metas[0]
    k = int(meta["k"])
    dest.execute("BEGIN IMMEDIATE")
    store.write_meta(dest, {**meta, "skip": min(m.get("skip", 0) for m in metas), "merged_from": len(cons)})
    for con in cons:
        for table, n in (("documents", 2), ("windows", 3), ("vocab", 3)):
            rows = con.execute(f"SELECT * FROM {table}")
            while chunk := rows.fetchmany(4096):
                dest.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({', '.join('?' * n)})", chunk)
    groups = {(s, int(layer)) for con in cons for s, layer in con.execute("SELECT DISTINCT source, layer FROM top")}
    for source, layer in sorted(groups):
        rows = [dict((u, (v, i)) for u, v, i in con.execute(
            "SELECT unit, vals, ids FROM top WHERE source = ? AND layer = ?", (source, layer))) for con in cons]
        units = sorted(set().union(*rows))
        values = [np.stack([store.array(r[u][0], "float32") if u in r else np.full(k, -np.inf, np.float32)
                            for u in units]) for r in rows]
        ids = [np.stack([store.array(r[u][1], "int64") if u in r else np.full(k, -1, np.int64) for u in units])
               for r in rows]
        v, i = merge_top(values, ids, k)
        dest.executemany("INSERT INTO top VALUES (?, ?, ?, ?, ?)", store.top_rows(source, layer, np.asarray(units), v, i))
    stats: dict[tuple[str, int], list[np.ndarray]] = {}
    for con in cons:
        for source, layer, total, total_sq, hist in con.execute("SELECT * FROM stats"):
            arrays = [store.array(total, "float64"), store.array(total_sq, "float64"), store.array(hist, "int64")]
            old = stats.get((source, layer))
            stats[source, layer] = arrays if old is None else [a + b for a, b in zip(old, arrays)]
    dest.executemany("INSERT INTO stats VALUES (?, ?, ?, ?, ?)",
                     [(s, layer, store.blob(t, "float64"), store.blob(q, "float64"), store.blob(h, "int64"))
                      for (s, layer), (t, q, h) in sorted(stats.items())])
    heads: dict[int, list[np.ndarray]] = {}
    chance: dict[str, list[float]] = {}
    for con in cons:
        for layer, sums, counts in con.execute("SELECT * FROM heads"):
            arrays = [store.array(sums, "float64"), store.array(counts, "int64")]
            old = heads.get(layer)
            heads[layer] = arrays if old is None else [a + b for a, b in zip(old, arrays)]
        for name, total, windows in con.execute("SELECT * FROM chance"):
            old = chance.get(name, [0.0, 0])
            chance[name] = [old[0] + total, old[1] + windows]
    dest.executemany("INSERT INTO heads VALUES (?, ?, ?)",
                     [(layer, store.blob(s, "float64"), store.blob(c, "int64")) for layer, (s, c) in sorted(heads.items())])
    dest.executemany("INSERT INTO chance VALUES (?, ?, ?)", [(n, t, w) for n, (t, w) in sorted(chance.items())])
    progress = [load_progress(con) or {"tokens": 0, "windows": 0, "batches": 0, "seconds": 0.0, "done": False}
                for con in cons]
    save_progress(dest, {"tokens": sum(p["tokens"] for p in progress), "windows": sum(p["windows"] for p in progress),
                         "batches": sum(p["batches"] for p in progress), "seconds": sum(p["seconds"] for p in progress),
                         "resume": None, "done": any(p["done"] for p in progress)})
    dest.execute("COMMIT")
