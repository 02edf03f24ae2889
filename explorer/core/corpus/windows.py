"""The corpus as the model reads it: fixed-length windows of tokens, in batches, restartable (no torch).

Documents are tokenized a piece at a time and packed end to end, each followed by the tokenizer's
end-of-text token where it has one, and the stream is cut into windows of ``window`` tokens (the
last one of the corpus, or of ``limit`` tokens, may be shorter: it runs alone). Window w covers the
stream's tokens ``w * window .. (w + 1) * window - 1``, so a token's global number ``g`` says where
it is: window ``g // window``, position ``g % window``. Every token also knows its document and its
position in that document. ``Batch.resume`` says where the next batch starts (a piece and a token
in it): a stopped run continues from there, reading nothing it has done.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from explorer.core.corpus.reading import Corpus, Piece, Where


@dataclass(frozen=True)
class Resume:
    """Where the stream continues: the piece, how many of its tokens are done, its first token's position
    in its document, and the stream's token and window counts so far."""

    where: Where = Where()
    consumed: int = 0
    doc_pos: int = 0
    tokens: int = 0       # stream tokens before this point (skipped ones included)
    window: int = 0       # the next window's number

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where.as_list(), "consumed": self.consumed, "doc_pos": self.doc_pos,
                "tokens": self.tokens, "window": self.window}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resume:
        return cls(Where(*data["where"]), data["consumed"], data["doc_pos"], data["tokens"], data["window"])


@dataclass
class Batch:
    ids: np.ndarray        # [B, n] int64 token ids
    doc: np.ndarray        # [B, n] int64 each token's document
    pos: np.ndarray        # [B, n] int64 its position in the document
    first_window: int      # the number of window 0 of this batch
    window: int            # the run's window length (the g of a token is window * w + position)
    resume: Resume         # where the next batch starts
    fraction: float        # about how much of the corpus has been read
    documents: list[tuple[int, str]] = field(default_factory=list)  # documents that start here: (number, name)

    @property
    def tokens(self) -> int:
        return int(self.ids.size)

    def global_ids(self) -> np.ndarray:
        """[B, n] int64: each token's number in the stream (g)."""
        w = np.arange(self.first_window, self.first_window + self.ids.shape[0], dtype=np.int64)
        return w[:, None] * self.window + np.arange(self.ids.shape[1], dtype=np.int64)[None, :]


class _Chunk:
    """One piece's tokens not yet cut into windows."""

    __slots__ = ("piece", "ids", "doc_pos0", "used")

    def __init__(self, piece: Piece, ids: np.ndarray, doc_pos0: int, used: int) -> None:
        self.piece, self.ids, self.doc_pos0, self.used = piece, ids, doc_pos0, used

    @property
    def left(self) -> int:
        return len(self.ids) - self.used


def batches(corpus: Corpus, tokenizer: Any, window: int, batch: int, start: Resume | None = None,
            skip: int = 0, limit: int | None = None) -> Iterator[Batch]:
    """Batches of up to ``batch`` windows of ``window`` tokens from ``start`` (or the corpus's beginning,
    after ``skip`` tokens, a whole number of windows). ``limit``: stop when the stream reaches this many
    tokens after ``skip`` (None: the whole corpus)."""
    if skip % window:
        raise ValueError(f"skip ({skip:,} tokens) must be a whole number of windows of {window}")
    start = start or Resume(tokens=0, window=0)
    end = None if limit is None else skip + limit                       # the stream token to stop before
    eos = getattr(tokenizer, "eos_id", None)
    pending: list[_Chunk] = []
    pieces = corpus.pieces(start.where)
    stream, next_window, fraction = start.tokens, start.window, 0.0
    first_piece, doc_pos = True, start.doc_pos
    names: list[tuple[int, str]] = []

    def fill(need: int) -> bool:
        """Tokenize pieces until ``need`` tokens wait (False at the corpus's end)."""
        nonlocal first_piece, doc_pos, fraction
        while sum(c.left for c in pending) < need:
            piece = next(pieces, None)
            if piece is None:
                return False
            ids = list(tokenizer.encode(piece.text)) if piece.text else []
            if piece.last and eos is not None:
                ids.append(eos)
            if piece.first:
                doc_pos = 0
                names.append((piece.where.doc, piece.name))
            used = start.consumed if first_piece else 0
            first_piece = False
            pending.append(_Chunk(piece, np.asarray(ids, dtype=np.int64), doc_pos, used))
            doc_pos += len(ids)
            fraction = piece.fraction
        return True

    def take(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, docs, poss = [], [], []
        while n:
            c = pending[0]
            k = min(n, c.left)
            ids.append(c.ids[c.used:c.used + k])
            docs.append(np.full(k, c.piece.where.doc, np.int64))
            poss.append(c.doc_pos0 + np.arange(c.used, c.used + k, dtype=np.int64))
            c.used += k
            n -= k
            if c.left == 0:
                pending.pop(0)
        return np.concatenate(ids), np.concatenate(docs), np.concatenate(poss)

    def here() -> Resume:
        while pending and pending[0].left == 0:
            pending.pop(0)
        if not pending:
            fill(1)  # everything tokenized is used: read ahead one piece to say where the stream continues
        if pending:
            c = pending[0]
            return Resume(c.piece.where, c.used, c.doc_pos0, stream, next_window)
        return Resume(Where(len(corpus.files), 0, 0, 0, 0), 0, 0, stream, next_window)

    while stream < skip:  # skipped windows: tokenized, not run
        if not fill(min(window, skip - stream)):
            return
        n = min(window, skip - stream, sum(c.left for c in pending))
        take(n)
        stream += n
        next_window = stream // window
        del names[:-1]  # only the document the run starts in keeps its name (memory stays flat)
    while True:
        rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        first = next_window
        while len(rows) < batch:
            want = window if end is None else min(window, end - stream)
            if want <= 0:
                break
            complete = fill(want)
            n = want if complete else sum(c.left for c in pending)
            if n == 0:
                break
            if n < window and rows:  # a short last window runs alone, in the next batch
                break
            rows.append(take(n))
            stream += n
            next_window += 1
            if n < window:
                break
        if not rows:
            return
        ids, docs, poss = (np.stack([r[i] for r in rows]) for i in range(3))
        done = names[:]
        names.clear()
        yield Batch(ids, docs, poss, first, window, here(), fraction, done)
