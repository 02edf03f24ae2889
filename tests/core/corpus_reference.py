"""Brute force for the corpus-run tests: the corpus packed into windows by hand, every window run through the
model with a plain recorder keeping whole arrays, and top-k by a full sort. Nothing of explorer.core.corpus
is used here except to read its database back."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import torch

from explorer.core.corpus.store import RESULT_TABLES


def pack(tokenizer, texts: list[str], window: int, limit: int | None = None) -> list[np.ndarray]:
    """Each document's tokens then the end-of-text token, end to end, cut into windows (the last may be short)."""
    stream: list[int] = []
    for text in texts:
        stream += tokenizer.encode(text) + ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])
    stream = stream[:limit] if limit is not None else stream
    return [np.asarray(stream[i:i + window], np.int64) for i in range(0, len(stream), window)]


class Keep:
    """A recorder that keeps every site's whole batch (and asks for the patterns)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def records(self, site: str, layer: int | None) -> bool:
        return True

    def __call__(self, site: str, layer: int | None, tensor: torch.Tensor) -> torch.Tensor:
        key = site if layer is None else f"blocks.{layer}.{site}"
        self.arrays[key] = tensor.detach().float().numpy().copy()
        return tensor


def run_windows(model, windows: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The full windows in one batch, a short last one alone: per batch, every site's arrays."""
    full = [w for w in windows if len(w) == len(windows[0])]
    batches = [np.stack(full)] + ([windows[-1][None]] if len(windows[-1]) != len(windows[0]) else [])
    out = []
    for ids in batches:
        keep = Keep()
        with torch.inference_mode():
            model(torch.as_tensor(ids), keep)
        out.append(keep.arrays)
    return out


def brute_top(values: np.ndarray, g: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest values of a unit over every token, ties to the smaller token number."""
    order = np.lexsort((g, -values.astype(np.float64)))[:k]
    return values[order], g[order]


def table_rows(path: str | Path, table: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute(f"SELECT * FROM {table}").fetchall())
    finally:
        con.close()


def same_results(a: str | Path, b: str | Path) -> None:
    """Every result table equal, row for row and byte for byte."""
    for table in RESULT_TABLES:
        assert table_rows(a, table) == table_rows(b, table), table
