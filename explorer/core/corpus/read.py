"""Reading a corpus run's database: what a notebook and the window's panels call (numpy and sqlite3, no torch).

>>> from explorer.core import open_run
>>> run = open_run("shakespeare__sample.corpus.db")
>>> run.top_examples("neurons", 2, 17)[0].tokens      # the contexts where neuron 17 of layer 2 fires hardest
>>> run.distribution("neurons", 2, 17).firing_rate    # how often it fires (value > 0)
>>> run.head_ranking("induction")[:3]                 # the head finder: heads by corpus induction score

Every call is a few indexed look-ups: it opens a unit's top examples in milliseconds, also while a
run is still writing the file (SQLite's WAL). A ``CorpusRun`` may be shared between threads.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from explorer.core.corpus import store
from explorer.core.corpus.reading import CorpusError
from explorer.core.corpus.units import Group


@dataclass(frozen=True)
class RunInfo:
    path: Path
    model: str
    corpus: str
    sae: str | None
    tokens: int
    windows: int
    window: int
    k: int
    complete: bool          # the corpus was read to its end
    seconds: float
    heads: tuple[int, int] | None   # (layers, heads) when head statistics were kept
    statistics: tuple[str, ...]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Example:
    """One of a unit's top contexts: ``token_ids[focus]`` is the token where it had ``value``."""

    value: float
    doc: int
    doc_name: str
    position: int           # the token's position in its document
    window: int
    index: int              # its position in the window (what the model saw before it: ``CorpusRun.window_ids``)
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    focus: int


@dataclass(frozen=True)
class PairExample:
    """One of a head's top query/key pairs: ``tokens[query]`` attends ``weight`` to ``tokens[key]``, ``lift`` above
    uniform attention."""

    lift: float
    weight: float
    doc: int
    doc_name: str
    window: int
    query_index: int        # in the window
    key_index: int
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    query: int              # positions in ``token_ids``
    key: int


@dataclass(frozen=True)
class Distribution:
    """A unit's activations over the corpus: ``counts[b]`` values in bin b of ``edges`` (accumulate.BIN_EDGES:
    bin b is (edges[b-1], edges[b]]; the first bin is <= edges[0], the last > edges[-1])."""

    tokens: int
    mean: float
    std: float
    firing_rate: float      # the share of tokens where it is > 0
    max: float
    counts: np.ndarray
    edges: np.ndarray

    def bin_of(self, value: float) -> int:
        """The bin a value (today's prompt's, say) falls in."""
        return int(np.searchsorted(self.edges, np.float32(value), side="left"))


@dataclass(frozen=True)
class HeadRank:
    layer: int
    head: int
    score: float
    chance: float
    windows: int            # the windows where the statistic is defined


def rank_heads(scores: np.ndarray, chance: float = math.nan, windows: np.ndarray | None = None,
               descending: bool = True) -> list[HeadRank]:
    """The head finder's order: every head of ``scores`` [L, H] by score (highest first unless not
    ``descending``), ties by layer then head, undefined (nan) scores last."""
    L, H = scores.shape
    flat = scores.reshape(-1)
    key = np.where(np.isnan(flat), np.inf, -flat if descending else flat)
    order = np.lexsort((np.arange(L * H), key))
    counts = np.zeros((L, H), np.int64) if windows is None else windows
    return [HeadRank(int(i // H), int(i % H), float(flat[i]), float(chance), int(counts.reshape(-1)[i]))
            for i in order]


class CorpusRun:
    """A corpus run's database, read-only."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._con = store.connect(self.path, readonly=True)
        self._lock = threading.Lock()
        self.meta = store.read_meta(self._con)
        if self.meta.get("format") != store.FORMAT:
            raise CorpusError(f"{self.path.name} is not a corpus run of this version (format {self.meta.get('format')})")
        self.window_length = int(self.meta["window"])
        self.edges = np.asarray(self.meta["bins"], dtype=np.float32)
        self._shown: dict[int, str] = {}

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> CorpusRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql, args).fetchall()

    @property
    def info(self) -> RunInfo:
        row = self._rows("SELECT tokens, windows, seconds, done FROM progress")
        tokens, windows, seconds, done = row[0] if row else (0, 0, 0.0, 0)
        m = self.meta
        return RunInfo(self.path, m["model"], m["corpus"], m.get("sae"), tokens, windows, m["window"], m["k"],
                       bool(done), seconds, tuple(m["heads"]) if m.get("heads") else None, tuple(m["statistics"]), m)

    def groups(self) -> list[Group]:
        """Every (source, layer) whose units the run kept."""
        return [Group(s["name"], layer, units) for s in self.meta["sources"] for layer, units in s["groups"]]

    # --- units ------------------------------------------------------------------------------------
    def _top(self, source: str, layer: int, unit: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._rows("SELECT vals, ids FROM top WHERE source = ? AND layer = ? AND unit = ?",
                         (source, int(layer), int(unit)))
        if not row:
            self._check_unit(source, layer, unit)
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        values, ids = store.array(row[0][0], "float32"), store.array(row[0][1], "int64")
        keep = ids >= 0
        return values[keep], ids[keep]

    def _check_unit(self, source: str, layer: int, unit: int) -> None:
        if source == "heads":
            return
        units = {(g.source, g.layer): g.units for g in self.groups()}.get((source, int(layer)))
        if units is None:
            raise CorpusError(f"this run kept no {source} in layer {layer}")
        if not 0 <= int(unit) < units:
            raise CorpusError(f"{source} {unit} is outside 0-{units - 1} in layer {layer}")

    def top_examples(self, source: str, layer: int, unit: int, before: int = 24, after: int = 8) -> list[Example]:
        """The contexts where a unit was largest, largest first: each with up to ``before`` tokens before the
        firing token and ``after`` after it (within its window)."""
        values, ids = self._top(source, layer, unit)
        W = self.window_length
        windows = self._windows(sorted({int(g) // W for g in ids}))
        out = []
        for value, g in zip(values, ids):
            w, i = divmod(int(g), W)
            tokens, segments = windows[w]
            lo, hi = max(0, i - before), min(len(tokens), i + after + 1)
            doc, position = _doc_of(segments, i)
            context = tuple(int(t) for t in tokens[lo:hi])
            out.append(Example(float(value), doc, "", position, w, i, context, (), i - lo))
        return self._named(out)

    def distribution(self, source: str, layer: int, unit: int) -> Distribution:
        """A unit's mean, spread, firing rate and histogram over every token of the run."""
        self._check_unit(source, layer, unit)
        row = self._rows("SELECT total, total_sq, hist FROM stats WHERE source = ? AND layer = ?",
                         (source, int(layer)))
        bins = len(self.edges) + 1
        tokens = self.info.tokens
        if not row or tokens == 0:
            return Distribution(0, math.nan, math.nan, math.nan, math.nan, np.zeros(bins, np.int64), self.edges)
        total, total_sq, hist = row[0]
        s = float(store.array(total, "float64")[unit])
        sq = float(store.array(total_sq, "float64")[unit])
        counts = np.frombuffer(hist, dtype="<i8", count=bins, offset=int(unit) * bins * 8).astype(np.int64)
        mean = s / tokens
        zero = int(np.searchsorted(self.edges, 0.0))
        values, _ = self._top(source, layer, unit)
        return Distribution(tokens, mean, math.sqrt(max(0.0, sq / tokens - mean * mean)),
                            float(counts[zero + 1:].sum()) / tokens, float(values[0]) if len(values) else math.nan,
                            counts, self.edges)

    def unit_table(self, source: str, layer: int) -> dict[str, np.ndarray]:
        """Every unit of a group at once, for sorting a list: mean, firing_rate and max ([units] each)."""
        row = self._rows("SELECT total, hist FROM stats WHERE source = ? AND layer = ?", (source, int(layer)))
        units = {(g.source, g.layer): g.units for g in self.groups()}.get((source, int(layer)), 0)
        tokens = max(1, self.info.tokens)
        out = {"mean": np.full(units, np.nan), "firing_rate": np.full(units, np.nan), "max": np.full(units, np.nan)}
        if row:
            hist = store.array(row[0][1], "int64", (units, len(self.edges) + 1))
            out["mean"] = store.array(row[0][0], "float64") / tokens
            out["firing_rate"] = hist[:, int(np.searchsorted(self.edges, 0.0)) + 1:].sum(1) / tokens
        for unit, vals in self._rows("SELECT unit, vals FROM top WHERE source = ? AND layer = ?", (source, int(layer))):
            out["max"][unit] = store.array(vals, "float32")[0]
        return out

    # --- heads ------------------------------------------------------------------------------------
    def head_scores(self) -> dict[str, Any]:
        """``{"scores": {stat: [L, H]}, "chance": {stat: float}, "windows": {stat: [L, H]}}``: each head's mean over
        the windows of its per-window statistic, the mean chance level over the same windows, the windows counted."""
        if not self.meta.get("heads"):
            raise CorpusError("this run kept no head statistics")
        L, H = self.meta["heads"]
        names = self.meta["statistics"]
        sums, counts = np.zeros((L, len(names), H)), np.zeros((L, len(names), H), np.int64)
        for layer, s, c in self._rows("SELECT layer, sums, counts FROM heads"):
            sums[layer] = store.array(s, "float64", (len(names), H))
            counts[layer] = store.array(c, "int64", (len(names), H))
        chance = {name: math.nan for name in names}
        for name, total, windows in self._rows("SELECT stat, total, windows FROM chance"):
            chance[name] = total / windows if windows else math.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return {"scores": {n: scores[:, i] for i, n in enumerate(names)}, "chance": chance,
                "windows": {n: counts[:, i] for i, n in enumerate(names)}}

    def head_ranking(self, stat: str, descending: bool = True) -> list[HeadRank]:
        """Every head by its corpus score ``stat`` (``rank_heads``), each beside the statistic's chance level."""
        table = self.head_scores()
        if stat not in table["scores"]:
            raise CorpusError(f"unknown head statistic {stat!r}; known: {', '.join(table['scores'])}")
        return rank_heads(table["scores"][stat], table["chance"][stat], table["windows"][stat], descending)

    def head_pairs(self, layer: int, head: int, before: int = 16, after: int = 4) -> list[PairExample]:
        """A head's top query/key pairs (accumulate.py's module docstring says which), best first."""
        lifts, ids = self._top("heads", layer, head)
        W = self.window_length
        windows = self._windows(sorted({int(i) // (W * W) for i in ids}))
        causal = bool(self.meta.get("causal", True))
        out = []
        for lift, pair in zip(lifts, ids):
            g, key = divmod(int(pair), W)
            w, q = divmod(g, W)
            tokens, segments = windows[w]
            lo, hi = max(0, min(q, key) - before), min(len(tokens), q + after + 1)
            weight = float(lift) + (1.0 / (q + 1) if causal else 1.0 / len(tokens))
            doc, _ = _doc_of(segments, q)
            out.append(PairExample(float(lift), weight, doc, "", w, q, key, tuple(int(t) for t in tokens[lo:hi]), (),
                                   q - lo, key - lo))
        return self._named(out)

    # --- tokens and documents ----------------------------------------------------------------------
    def window_ids(self, window: int) -> np.ndarray:
        """The token ids of a window, as the model read them."""
        return self._windows([int(window)])[int(window)][0]

    def prompt_ids(self, example: Example | PairExample) -> list[int]:
        """What the model had read when a top example happened: its window's tokens up to that token (the query's,
        for a pair). A panel's "make it the prompt" runs these ids (``LoadedModel.trace_ids``)."""
        index = example.index if isinstance(example, Example) else example.query_index
        return self.window_ids(example.window)[:index + 1].tolist()

    def token_text(self, ids: list[int] | tuple[int, ...]) -> str:
        """The text of token ids (their bytes joined; invalid UTF-8 shown as U+FFFD)."""
        if not ids:
            return ""
        got = dict(self._rows(f"SELECT id, bytes FROM vocab WHERE id IN ({','.join('?' * len(set(ids)))})",
                              tuple(set(int(i) for i in ids))))
        return b"".join(got.get(int(i), b"") for i in ids).decode("utf-8", "replace")

    def _windows(self, numbers: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        if not numbers:
            return {}
        dtype = store.token_dtype(int(self.meta["vocab_size"]))
        rows = self._rows(f"SELECT window, tokens, docs FROM windows WHERE window IN ({','.join('?' * len(numbers))})",
                          tuple(numbers))
        return {w: (store.array(t, dtype).astype(np.int64), store.array(d, "int64", (-1, 3))) for w, t, d in rows}

    def _named(self, items: list[Any]) -> list[Any]:
        """Fill in the documents' names and the tokens' shown forms."""
        from dataclasses import replace

        docs = sorted({x.doc for x in items})
        names = dict(self._rows(f"SELECT doc, name FROM documents WHERE doc IN ({','.join('?' * len(docs))})",
                                tuple(docs))) if docs else {}
        need = sorted({t for x in items for t in x.token_ids} - set(self._shown))
        for start in range(0, len(need), 900):
            part = need[start:start + 900]
            self._shown.update(self._rows(f"SELECT id, display FROM vocab WHERE id IN ({','.join('?' * len(part))})",
                                          tuple(part)))
        return [replace(x, doc_name=names.get(x.doc, f"document {x.doc}"),
                        tokens=tuple(self._shown.get(t, f"<{t}>") for t in x.token_ids)) for x in items]


def _doc_of(segments: np.ndarray, index: int) -> tuple[int, int]:
    """(document, position in it) of a window's token from the window's (offset, doc, position) starts."""
    row = segments[np.searchsorted(segments[:, 0], index, side="right") - 1]
    return int(row[1]), int(row[2] + index - row[0])


def open_run(path: str | Path) -> CorpusRun:
    """Open a corpus run's database to read it (see the module docstring)."""
    return CorpusRun(path)


def summary_lines(path: str | Path) -> list[str]:
    """What a finished run holds, for the command line."""
    with open_run(path) as run:
        return _lines(run)


def _lines(run: CorpusRun) -> list[str]:
    info = run.info
    state = "the whole corpus" if info.complete else "more remain: the same command, with more --tokens or none, goes on"
    lines = [f"{info.model} over {info.corpus}: {info.tokens:,} tokens in {info.windows:,} windows of {info.window} "
             f"({state})"]
    by_source: dict[str, list[Group]] = {}
    for group in run.groups():
        by_source.setdefault(group.source, []).append(group)
    for source, groups in by_source.items():
        layers = [g.layer for g in groups]
        where = f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"
        lines.append(f"{source}: {where}, {groups[0].units:,} each, top {info.k} contexts, mean, firing rate, histogram")
    if info.heads and info.tokens:
        table = run.head_ranking("induction")[:3]
        lines.append("heads by induction score: " + ", ".join(
            f"{r.layer}.{r.head} {r.score:.3f}" for r in table) + f" (chance {table[0].chance:.3f})")
    return lines
