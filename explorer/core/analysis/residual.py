"""The residual stream across depth for the residual panel: norms, sublayer sizes, logit lens (no Qt).

Layer boundaries: a model of L blocks has L + 1 places where the stream can be read, boundary
``l < L`` being ``blocks.{l}.resid_pre`` (what enters block l; boundary 0 is the embedding plus
positions) and boundary L being ``resid_final`` (after the last block, before the final norm).

* ``residual_norms``: the L2 norm of the stream at every boundary and position.
* ``sublayer_contributions``: the norm of what each sublayer wrote, ``blocks.{l}.attn.out`` and
  ``blocks.{l}.mlp.out``. In a pre-norm model they are exactly the steps of the stream
  (``resid_mid - resid_pre == attn.out``, ``resid_pre[l+1] - resid_mid == mlp.out``); in a
  post-norm model the stream is normalised after each addition, so they are what was added
  before that normalisation.
* ``consecutive_cosine``: cosine similarity of the stream before and after each block (1: the
  block barely turned it).
* ``logit_lens``: every boundary read through the model's own final norm and un-embedding
  (``Transformer.final_logits``), as if the model stopped there. The last boundary is the
  model's real output. Early boundaries were never trained to be read this way. It costs one
  n x V matmul per boundary, so the UI fills it progressively: ``empty_lens`` then
  ``lens_columns`` for a few positions at a time (the selected one first), ``LogitLens.fill``.

Everything reads the Trace only; the logit lens also runs the final norm and un-embedding of
``trace._model`` (no forward pass through any block), a block of positions at a time so that
memory stays bounded for long prompts and large vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.ranking import top_k_rows

if TYPE_CHECKING:
    from explorer.core.trace import Trace

# Logit-lens chunks hold at most this many logits (positions x vocabulary) at once: 64 MiB of float32.
LENS_CHUNK_ELEMENTS = 16 * 2**20


def boundary_labels(n_layers: int) -> list[str]:
    """Row labels for the L + 1 boundaries: ``embed`` (entering block 0), ``after 0`` .. ``after L-1``."""
    return ["embed"] + [f"after {layer}" for layer in range(n_layers)]


def residual_stack(trace: Trace) -> np.ndarray:
    """The stream at every boundary: ``resid_pre`` of each block, then ``resid_final``.  float32 [L+1, n, d]"""
    L = trace.config.n_layers
    arrays = [trace[f"blocks.{layer}.resid_pre"] for layer in range(L)] + [trace["resid_final"]]
    return np.stack([np.asarray(a, dtype=np.float32) for a in arrays])


def _boundaries(trace: Trace):
    """The stream at each boundary in float64, one at a time (no [L+1, n, d] stack is built)."""
    L = trace.config.n_layers
    for key in [f"blocks.{layer}.resid_pre" for layer in range(L)] + ["resid_final"]:
        yield np.asarray(trace[key], dtype=np.float64)


def residual_norms(trace: Trace) -> np.ndarray:
    """L2 norm of the stream at every boundary and position (computed in float64).  float32 [L+1, n]"""
    return np.stack([np.sqrt(np.einsum("nd,nd->n", x, x)) for x in _boundaries(trace)]).astype(np.float32)


def sublayer_contributions(trace: Trace) -> dict[str, np.ndarray]:
    """Norms of what each sublayer wrote, per layer and position: ``{"attn": [L, n], "mlp": [L, n]}``
    (float32). ``mlp`` is all zeros for a model without FFN (``trace.config.has_ffn`` is False);
    the UI should say "no FFN" rather than draw it. Raises KeyError when the outputs are neither
    stored nor derivable (a trace without its model that did not capture them)."""
    cfg, n = trace.config, trace.n_tokens
    attn = np.zeros((cfg.n_layers, n), dtype=np.float32)
    mlp = np.zeros((cfg.n_layers, n), dtype=np.float32)
    for layer in range(cfg.n_layers):
        plan = cfg.layer(layer)  # (Nemotron-H: a block without a mixer, or without an FFN)
        if plan.mixer != "none":
            attn[layer] = _row_norms(trace[f"blocks.{layer}.attn.out"])
        if plan.has_ffn:
            mlp[layer] = _row_norms(trace[f"blocks.{layer}.mlp.out"])
    return {"attn": attn, "mlp": mlp}


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of corresponding vectors along the last axis (0 where either is all zeros)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = np.sqrt(np.einsum("...d,...d->...", a, a) * np.einsum("...d,...d->...", b, b))
    dots = np.einsum("...d,...d->...", a, b)
    cos = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
    return np.clip(cos, -1.0, 1.0)


def consecutive_cosine(trace: Trace) -> np.ndarray:
    """Cosine similarity between the stream entering and leaving each block.  float32 [L, n]"""
    rows, before = [], None
    for after in _boundaries(trace):
        if before is not None:
            rows.append(cosine_rows(before, after))
        before = after
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, trace.n_tokens), np.float32)


def _row_norms(a: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(a, dtype=np.float64), axis=-1).astype(np.float32)


@dataclass(frozen=True, eq=False)
class LogitLens:
    """Each boundary's stream read as a next-token prediction (B = L + 1 boundaries, n positions).

    Attributes
    ----------
    ids, probs, logits
        ``[B, n, top]``: the ``top`` most likely next tokens at each boundary and position, most
        likely first (int64), their probabilities (float32) and logits (float32).
    target_probs, target_ranks
        ``[B, n - 1]``: probability (float32) and 0-based rank over the vocabulary (int64; ties
        by lower id) of the token that really comes next, ``token_ids[i + 1]`` at position i.
    entropy
        ``[B, n]``: entropy of each predicted distribution in nats (float32).
    labels
        The B row labels (``boundary_labels``).
    filled
        ``[n]`` bool: which positions are computed. A lens filled progressively (``empty_lens``,
        ``lens_columns``, ``LogitLens.fill``) starts all False; ``logit_lens`` returns it all True.
        Values of unfilled positions are zeros and mean nothing.
    """

    ids: np.ndarray
    probs: np.ndarray
    logits: np.ndarray
    target_probs: np.ndarray
    target_ranks: np.ndarray
    entropy: np.ndarray
    labels: tuple[str, ...]
    filled: np.ndarray

    @property
    def n_boundaries(self) -> int:
        return int(self.ids.shape[0])

    @property
    def complete(self) -> bool:
        return bool(self.filled.all())

    def fill(self, block: LensBlock) -> None:
        """Write a block of computed positions in (one thread at a time: the UI does it on the GUI thread)."""
        a, b = block.start, block.stop
        self.ids[:, a:b], self.probs[:, a:b], self.logits[:, a:b] = block.ids, block.probs, block.logits
        self.entropy[:, a:b] = block.entropy
        t_stop = min(b, self.target_probs.shape[1])
        if t_stop > a:
            self.target_probs[:, a:t_stop] = block.target_probs[:, : t_stop - a]
            self.target_ranks[:, a:t_stop] = block.target_ranks[:, : t_stop - a]
        self.filled[a:b] = True

    def first_correct_boundary(self) -> np.ndarray:
        """Per position i < n - 1, the first boundary whose top prediction is the real next token
        and stays so at every later boundary; -1 when the final prediction is wrong.  int64 [n - 1]"""
        correct = self.target_ranks == 0                               # [B, n-1]
        stays = np.flip(np.logical_and.accumulate(np.flip(correct, 0), axis=0), 0)
        first = np.argmax(stays, axis=0)
        return np.where(stays[-1] if stays.size else np.zeros(0, bool), first, -1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class LensBlock:
    """The lens at positions ``start .. stop - 1`` (arrays as in ``LogitLens``, over those columns;
    the target arrays cover the positions among them that have a next token)."""

    start: int
    stop: int
    ids: np.ndarray
    probs: np.ndarray
    logits: np.ndarray
    target_probs: np.ndarray
    target_ranks: np.ndarray
    entropy: np.ndarray


def empty_lens(trace: Trace, top: int = 1, vocab_size: int | None = None) -> LogitLens | None:
    """A lens of the right shape with no position computed yet (None when the trace has no model)."""
    model = getattr(trace, "_model", None)
    if model is None:
        return None
    B, n = trace.config.n_layers + 1, trace.n_tokens
    top = _top_of(model, top, vocab_size)
    return LogitLens(ids=np.zeros((B, n, top), np.int64), probs=np.zeros((B, n, top), np.float32),
                     logits=np.zeros((B, n, top), np.float32),
                     target_probs=np.zeros((B, max(n - 1, 0)), np.float32),
                     target_ranks=np.zeros((B, max(n - 1, 0)), np.int64), entropy=np.zeros((B, n), np.float32),
                     labels=tuple(boundary_labels(trace.config.n_layers)), filled=np.zeros(n, bool))


def _top_of(model, top: int, vocab_size: int | None) -> int:
    V = int(model.unembed.weight.shape[0])
    limit = V if vocab_size is None else max(1, min(int(vocab_size), V))
    return max(1, min(int(top), limit))


def logit_lens(trace: Trace, top: int = 1, vocab_size: int | None = None,
               chunk_elements: int = LENS_CHUNK_ELEMENTS) -> LogitLens | None:
    """Apply the final norm and un-embedding (``trace._model.final_logits``) to the stream at
    every boundary and keep the ``top`` predictions per position (see :class:`LogitLens`).

    Softmax runs in float32, max-subtracted (stable), over the whole
    vocabulary. ``vocab_size`` leaves out padding ids beyond the tokenizer's vocabulary (they
    get probability 0). The last row is the model's own output distribution. Work proceeds one
    boundary and at most ``chunk_elements`` logits at a time. None when the trace has no model.
    """
    lens = empty_lens(trace, top, vocab_size)
    if lens is not None:
        lens.fill(lens_columns(trace, 0, trace.n_tokens, top, vocab_size, chunk_elements))
    return lens


def lens_columns(trace: Trace, start: int, stop: int, top: int = 1, vocab_size: int | None = None,
                 chunk_elements: int = LENS_CHUNK_ELEMENTS, check=None, next_id: int | None = None) -> LensBlock:
    """The lens at positions ``start .. stop - 1`` only, every boundary (the same numbers as
    ``logit_lens`` there). ``check()`` is called between chunks (it may raise to abandon the work).
    ``next_id``: the token that follows the trace's last position (not in the trace: a generation's next
    token), so that the last position has a target rank and probability too.

    Every (boundary, position) row goes through one matmul per chunk of rows, so a few positions
    read the un-embedding once rather than once per boundary. No [rows, V] softmax is kept: with
    m the row's largest logit and s = sum exp(logit - m), a probability is exp(logit - m - ln s)
    and the entropy is m + ln s - sum exp(logit - m) * logit / s (all float32, max-subtracted)."""
    import torch

    model = trace._model
    cfg, n = trace.config, trace.n_tokens
    start, stop = max(0, int(start)), min(n, int(stop))
    c = max(stop - start, 0)
    B = cfg.n_layers + 1
    from explorer.core.placement import model_dtype, tail_device

    device, dtype = tail_device(model), model_dtype(model)
    V = int(model.unembed.weight.shape[0])
    limit = V if vocab_size is None else max(1, min(int(vocab_size), V))
    top = _top_of(model, top, vocab_size)
    chunk = max(1, int(chunk_elements) // V)
    tc = max(min(stop, n - 1) - start, 0)  # positions with a real next token: start .. start + tc - 1
    last_next = next_id is not None and stop == n and c > 0  # the last position's next token is given

    ids = np.zeros((B * c, top), dtype=np.int64)
    probs = np.zeros((B * c, top), dtype=np.float32)
    logits = np.zeros((B * c, top), dtype=np.float32)
    entropy = np.zeros(B * c, dtype=np.float32)
    t_probs = np.zeros((B, c), dtype=np.float32)
    t_ranks = np.zeros((B, c), dtype=np.int64)
    keys = [f"blocks.{layer}.resid_pre" for layer in range(cfg.n_layers)] + ["resid_final"]
    if c == 0:
        return LensBlock(start, stop, ids.reshape(B, 0, top), probs.reshape(B, 0, top), logits.reshape(B, 0, top),
                         np.zeros((B, 0), np.float32), np.zeros((B, 0), np.int64), entropy.reshape(B, 0))
    with torch.inference_mode():
        # where the trace keeps the stream (on the device for a device-resident trace: nothing crosses to the host)
        stream = torch.cat([trace.tensor(key)[start:stop] for key in keys]).to(device, dtype)
        following = np.zeros(c, dtype=np.int64)
        following[:tc] = np.asarray(trace.token_ids[start + 1:start + 1 + tc], dtype=np.int64)
        if last_next:
            following[c - 1], tc = int(next_id), c
        rows_next = torch.as_tensor(np.tile(following, B), device=device)         # [B * c]
        has_next = torch.as_tensor(np.tile(np.arange(c) < tc, B), device=device)  # [B * c]
        for lo in range(0, B * c, chunk):
            if check is not None:
                check()
            hi = min(B * c, lo + chunk)
            raw = model.final_logits(stream[None, lo:hi])[0].float()[:, :limit]   # [r, V'] (padding ids left out)
            top_ids = top_k_rows(raw, top)
            top_logits = raw.gather(-1, top_ids)
            p = torch.softmax(raw, dim=-1)                                        # max-subtracted: stable
            top_p = p.gather(-1, top_ids)
            lse = top_logits[:, 0] - top_p[:, 0].log()                            # ln sum exp(logit)
            ids[lo:hi] = _np(top_ids)
            logits[lo:hi] = _np(top_logits)
            probs[lo:hi] = _np(top_p)
            entropy[lo:hi] = _np((lse - torch.linalg.vecdot(p, raw)).clamp_min(0.0))  # -sum p ln p
            # the real next token of the rows that have one (rank 0-based, equal logits: lower ids first)
            t = rows_next[lo:hi, None]
            inside = t < limit                        # an id past ``vocab_size``: probability 0, ranked last
            t_in = torch.where(inside, t, 0)
            r = np.arange(lo, hi)
            t_ranks[r // c, r % c] = np.where(_np(inside[:, 0]), _ranks(raw, t_in), limit)
            t_probs[r // c, r % c] = _np(p.gather(-1, t_in)[:, 0] * (has_next[lo:hi] & inside[:, 0]))
    return LensBlock(start, stop, ids.reshape(B, c, top), probs.reshape(B, c, top), logits.reshape(B, c, top),
                     t_probs[:, :tc], t_ranks[:, :tc], entropy.reshape(B, c))


@dataclass(frozen=True, eq=False)
class TokenPath:
    """One token's fate at one position through the depth (the logit lens of that token alone): after
    every boundary (``labels``), its probability (float32 [B]), 0-based rank over the vocabulary (int64 [B];
    equal logits: lower ids first) and logit (float32 [B]) as the next token after ``position``."""

    position: int
    token_id: int
    labels: tuple[str, ...]
    probs: np.ndarray
    ranks: np.ndarray
    logits: np.ndarray

    def first_top(self) -> int | None:
        """The first boundary from which the token stays the top prediction to the end (None: never)."""
        return first_top(self.ranks)


def first_top(ranks: np.ndarray) -> int | None:
    """The first boundary from which 0-based ``ranks`` [B] stay 0 (the top prediction) to the end; None: never."""
    top = np.asarray(ranks) == 0
    stays = np.flip(np.logical_and.accumulate(np.flip(top)))
    return int(np.argmax(stays)) if stays.size and stays[-1] else None


def token_across_layers(trace: Trace, position: int, token_id: int, vocab_size: int | None = None) -> TokenPath:
    """``token_id``'s probability and rank as the next token after ``position`` when the stream is read
    after every boundary through the final norm and un-embedding (the same reading and softmax as
    ``lens_columns``: the last boundary is the model's own output). ``vocab_size`` leaves out padding ids
    (a ``token_id`` past it is refused). One [B, V] matmul: no [n, V] is built."""
    import torch

    model = getattr(trace, "_model", None)
    if model is None:
        raise ValueError("the token across layers needs the model: this trace was loaded without it")
    cfg, n = trace.config, trace.n_tokens
    if not 0 <= position < n:
        raise ValueError(f"position {position} is not in this trace of {n} tokens")
    from explorer.core.placement import model_dtype, tail_device

    V = int(model.unembed.weight.shape[0])
    limit = V if vocab_size is None else max(1, min(int(vocab_size), V))
    if not 0 <= int(token_id) < limit:
        raise ValueError(f"token {token_id} is outside this model's vocabulary of {limit}")
    keys = [f"blocks.{layer}.resid_pre" for layer in range(cfg.n_layers)] + ["resid_final"]
    with torch.inference_mode():
        stream = torch.cat([trace.tensor(key)[position:position + 1] for key in keys])
        stream = stream.to(tail_device(model), model_dtype(model))
        raw = model.final_logits(stream[None])[0].float()[:, :limit]                  # [B, V']
        t = torch.full((raw.shape[0], 1), int(token_id), dtype=torch.long, device=raw.device)
        probs = torch.softmax(raw, dim=-1).gather(-1, t)[:, 0]
        ranks = _ranks(raw, t)
        logits = raw.gather(-1, t)[:, 0]
    return TokenPath(int(position), int(token_id), tuple(boundary_labels(cfg.n_layers)), _np(probs).astype(np.float32),
                     np.asarray(ranks, dtype=np.int64), _np(logits).astype(np.float32))


def _ranks(raw, t) -> np.ndarray:
    """0-based rank of the logit at ``t`` [r, 1] in each row of ``raw`` [r, V]: how many are larger, and
    equal ones with a lower id (numpy on the CPU: its comparisons are several times torch's there)."""
    import torch

    if raw.device.type != "cpu":
        t_logit = raw.gather(-1, t)
        same = raw == t_logit
        return _np((raw > t_logit).sum(-1) + (same & (torch.arange(raw.shape[1], device=raw.device) < t)).sum(-1))
    a, at = raw.numpy(), t.numpy()
    t_logit = np.take_along_axis(a, at, -1)
    rank = np.count_nonzero(a > t_logit, axis=-1)
    ties = np.count_nonzero(a == t_logit, axis=-1) > 1
    for row in np.flatnonzero(ties):  # equal logits (rare): those with a lower id rank first
        rank[row] += np.count_nonzero(a[row, : at[row, 0]] == t_logit[row, 0])
    return rank


def _np(t) -> np.ndarray:  # a torch tensor -> numpy on the CPU
    return t.detach().cpu().numpy()
