"""GPT-2's ``encoder.json`` and ``vocab.bpe`` rebuilt from the shipped ``gpt2.tiktoken``, for tests
of the loaders that read those two files (Hugging Face's ``vocab.json``/``merges.txt``).

Each merge is recovered from the ranks alone: running byte-level BPE on a token's bytes with only
the lower-ranked tokens leaves exactly the two pieces that were merged to make it.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.core.tokenize.base import _unicode_to_byte, load_gpt2_ranks


def _last_merge(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    splits = [(token[:i], token[i:]) for i in range(1, len(token))
              if ranks.get(token[:i], rank) < rank and ranks.get(token[i:], rank) < rank]
    if len(splits) == 1:  # the usual case: only one way to make it from two earlier tokens
        return splits[0]
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 30))
        assert ranks.get(parts[best] + parts[best + 1], 1 << 30) < rank
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts[0], parts[1]


def gpt2_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's ``encoder.json`` mapping and its merges (GPT-2's printable-character spelling)."""
    ranks = load_gpt2_ranks()
    b2u = {b: c for c, b in _unicode_to_byte().items()}
    text = lambda b: "".join(b2u[x] for x in b)
    encoder = {text(t): r for t, r in ranks.items()}
    encoder["<|endoftext|>"] = 50256
    merges = [(text(a), text(b)) for a, b in (_last_merge(t, r, ranks) for t, r in
                                              sorted(ranks.items(), key=lambda kv: kv[1]) if len(t) > 1)]
    return encoder, merges


def write_gpt2_files(directory: Path) -> tuple[Path, Path]:
    encoder, merges = _cached()
    encoder_json, vocab_bpe = directory / "encoder.json", directory / "vocab.bpe"
    encoder_json.write_text(json.dumps(encoder), encoding="utf-8")
    vocab_bpe.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return encoder_json, vocab_bpe


_CACHE: list = []


def _cached() -> tuple[dict[str, int], list[tuple[str, str]]]:
    if not _CACHE:
        _CACHE.append(gpt2_vocab_and_merges())
    return _CACHE[0]


def transformers_gpt2_tokenizer():
    """A ``transformers`` GPT-2 tokenizer built in memory from the shipped ranks (no download)."""
    from transformers import GPT2TokenizerFast

    encoder, merges = _cached()
    return GPT2TokenizerFast(vocab=dict(encoder), merges=list(merges))
