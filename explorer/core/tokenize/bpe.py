"""Byte-level BPE training whose result is a tiktoken ``Encoding``.

The trainer keeps, for every unique pre-tokenized chunk of the training text,
exactly the segmentation that tiktoken would produce with the vocabulary
learned so far.  tiktoken encodes a chunk by (a) returning the chunk's own
token if the whole chunk is a token, otherwise (b) starting from single bytes
and repeatedly merging the leftmost adjacent pair whose concatenated bytes has
the lowest rank.  Because a newly added token always has the highest rank, the
tiktoken segmentation under the grown vocabulary is obtained by *continuing*
that merge loop from the previous segmentation; only chunks that contain an
adjacent pair spelling the new token (or that equal it) can change.  The
trainer therefore updates pair counts incrementally for just those chunks, and
its final segmentation is identical to ``Encoding.encode_ordinary`` by
construction (tests check this against tiktoken itself).
"""

from __future__ import annotations

import base64
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

try:  # tiktoken depends on `regex`; \p{L} needs it.
    import regex as _re
except ImportError:  # pragma: no cover - regex is always present with tiktoken
    import re as _re  # type: ignore[no-redef]

import tiktoken

GPT2_PATTERN: str = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
"""The GPT-2 pre-tokenizer regex (tiktoken's r50k_base ``pat_str``)."""

ENDOFTEXT: str = "<|endoftext|>"

ProgressFn = Callable[[int, int], None]
Pair = tuple[int, int]


@dataclass
class BpeTrainResult:
    """Outcome of training: ranks plus the trainer's final chunk segmentation."""

    ranks: dict[bytes, int]
    chunk_tokens: dict[str, list[int]] = field(default_factory=dict)
    chunk_counts: dict[str, int] = field(default_factory=dict)


def _merge_to_fixpoint(parts: list[int], vocab: list[bytes], ranks: dict[bytes, int]) -> list[int]:
    """Continue tiktoken's merge loop: merge the leftmost lowest-rank pair until none is a token."""
    while len(parts) > 1:
        best_rank = -1
        best_i = -1
        for i in range(len(parts) - 1):
            r = ranks.get(vocab[parts[i]] + vocab[parts[i + 1]])
            if r is not None and (best_rank < 0 or r < best_rank):
                best_rank = r
                best_i = i
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [best_rank]
    return parts


def train_byte_bpe_detailed(
    text: str,
    vocab_size: int,
    pattern: str = GPT2_PATTERN,
    progress: ProgressFn | None = None,
) -> BpeTrainResult:
    """Train byte-level BPE and also return the per-chunk segmentation.

    See :func:`train_byte_bpe`.  If the text runs out of mergeable pairs the
    returned vocabulary is smaller than ``vocab_size``.
    """
    if vocab_size < 256:
        raise ValueError("vocab_size must be at least 256 (the single bytes)")

    vocab: list[bytes] = [bytes([b]) for b in range(256)]
    ranks: dict[bytes, int] = {tok: i for i, tok in enumerate(vocab)}

    chunk_counter = Counter(_re.findall(pattern, text))
    chunks: list[str] = list(chunk_counter)  # first-occurrence order: deterministic
    counts: list[int] = [chunk_counter[c] for c in chunks]
    chunk_bytes: list[bytes] = [c.encode("utf-8") for c in chunks]
    words: list[list[int]] = [list(b) for b in chunk_bytes]
    # With only single bytes, no pair of bytes is a token yet; no merging needed.
    word_of_bytes: dict[bytes, int] = {b: i for i, b in enumerate(chunk_bytes)}

    pair_counts: dict[Pair, int] = {}
    pair_words: dict[Pair, set[int]] = {}
    for wi, w in enumerate(words):
        c = counts[wi]
        for p in zip(w, w[1:]):
            pair_counts[p] = pair_counts.get(p, 0) + c
            pair_words.setdefault(p, set()).add(wi)
    heap: list[tuple[int, int, int]] = [(-n, a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)

    total = vocab_size - 256
    done = 0
    while len(vocab) < vocab_size:
        # Most frequent pair; ties broken by smallest (rank_a, rank_b).
        best: Pair | None = None
        while heap:
            neg, a, b = heapq.heappop(heap)
            if -neg > 0 and pair_counts.get((a, b), 0) == -neg:
                best = (a, b)
                break
        if best is None:
            break  # nothing left to merge
        new_bytes = vocab[best[0]] + vocab[best[1]]
        # Segmentations are merge fixpoints, so no adjacent pair spells an
        # existing token; keep the guard anyway (byte strings must be unique).
        if new_bytes in ranks:  # pragma: no cover - unreachable by construction
            pair_counts[best] = 0
            continue
        new_id = len(vocab)
        vocab.append(new_bytes)
        ranks[new_bytes] = new_id

        # Chunks that may change: any adjacent split of new_bytes, or the chunk itself.
        affected: set[int] = set()
        for k in range(1, len(new_bytes)):
            left = ranks.get(new_bytes[:k])
            right = ranks.get(new_bytes[k:])
            if left is not None and right is not None:
                affected |= pair_words.get((left, right), set())
        whole = word_of_bytes.get(new_bytes)
        if whole is not None:
            affected.add(whole)

        for wi in sorted(affected):
            old = words[wi]
            if chunk_bytes[wi] == new_bytes:
                new = [new_id]  # tiktoken's whole-chunk fast path
            else:
                new = _merge_to_fixpoint(list(old), vocab, ranks)
            if new == old:
                continue
            words[wi] = new
            c = counts[wi]
            old_pairs = Counter(zip(old, old[1:]))
            new_pairs = Counter(zip(new, new[1:]))
            for p in old_pairs.keys() | new_pairs.keys():
                delta = (new_pairs.get(p, 0) - old_pairs.get(p, 0)) * c
                if p not in new_pairs:
                    s = pair_words.get(p)
                    if s is not None:
                        s.discard(wi)
                        if not s:
                            del pair_words[p]
                elif p not in old_pairs:
                    pair_words.setdefault(p, set()).add(wi)
                if delta:
                    n = pair_counts.get(p, 0) + delta
                    if n > 0:
                        pair_counts[p] = n
                        heapq.heappush(heap, (-n, p[0], p[1]))
                    else:
                        pair_counts.pop(p, None)
        done += 1
        if progress is not None:
            progress(done, total)

    return BpeTrainResult(
        ranks=ranks,
        chunk_tokens={chunks[i]: words[i] for i in range(len(chunks))},
        chunk_counts={chunks[i]: counts[i] for i in range(len(chunks))},
    )


def train_byte_bpe(
    text: str,
    vocab_size: int,
    pattern: str = GPT2_PATTERN,
    progress: ProgressFn | None = None,
) -> dict[bytes, int]:
    """Train byte-level BPE on ``text`` and return tiktoken mergeable ranks.

    Ranks 0..255 are the single bytes (rank == byte value); each merge adds the
    next integer rank.  The pair merged at each step is the most frequent
    adjacent pair over the pre-tokenized chunks (ties: smallest ``(rank_a,
    rank_b)``).  ``progress(done, total)`` is called after every merge.
    """
    return train_byte_bpe_detailed(text, vocab_size, pattern, progress).ranks


def make_encoding(
    ranks: dict[bytes, int],
    name: str = "explorer-bpe",
    pattern: str = GPT2_PATTERN,
    special_tokens: dict[str, int] | None = None,
) -> tiktoken.Encoding:
    """Build a tiktoken ``Encoding``; by default ``<|endoftext|>`` gets id ``len(ranks)``."""
    if special_tokens is None:
        special_tokens = {ENDOFTEXT: len(ranks)}
    return tiktoken.Encoding(
        name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special_tokens
    )


def save_ranks(ranks: dict[bytes, int], path: str | PathLike[str]) -> None:
    """Write ranks in tiktoken's ``.tiktoken`` format (``base64 rank`` per line, by rank).

    (tiktoken's own ``dump_tiktoken_bpe`` needs the optional ``blobfile`` package.)
    """
    lines = [
        base64.b64encode(tok) + b" " + str(rank).encode("ascii") + b"\n"
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    Path(path).write_bytes(b"".join(lines))


def load_ranks(path: str | PathLike[str]) -> dict[bytes, int]:
    """Read a ``.tiktoken`` ranks file.

    Parsed directly rather than via ``tiktoken.load.load_tiktoken_bpe``, which
    caches by path in a temp dir and could return stale contents after a re-save.
    """
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            tok, rank = line.split()
            ranks[base64.b64decode(tok, validate=True)] = int(rank)
        except Exception as e:  # noqa: BLE001 - re-raised with context
            raise ValueError(f"{path}:{lineno}: bad .tiktoken line {line!r}") from e
    return ranks
