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


def residual_norms(trace: Trace) -> np.ndarray:
    """L2 norm of the stream at every boundary and position (computed in float64).  float32 [L+1, n]"""
    return np.linalg.norm(residual_stack(trace).astype(np.float64), axis=-1).astype(np.float32)


def sublayer_contributions(trace: Trace) -> dict[str, np.ndarray]:
    """Norms of what each sublayer wrote, per layer and position: ``{"attn": [L, n], "mlp": [L, n]}``
    (float32). ``mlp`` is all zeros for a model without FFN (``trace.config.has_ffn`` is False);
    the UI should say "no FFN" rather than draw it. Raises KeyError when the outputs are neither
    stored nor derivable (a trace without its model that did not capture them)."""
    cfg, n = trace.config, trace.n_tokens
    attn = np.zeros((cfg.n_layers, n), dtype=np.float32)
    mlp = np.zeros((cfg.n_layers, n), dtype=np.float32)
    for layer in range(cfg.n_layers):
        attn[layer] = _row_norms(trace[f"blocks.{layer}.attn.out"])
        if cfg.has_ffn:
            mlp[layer] = _row_norms(trace[f"blocks.{layer}.mlp.out"])
    return {"attn": attn, "mlp": mlp}


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of corresponding vectors along the last axis (0 where either is all zeros)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = (a * b).sum(axis=-1)
    cos = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
    return np.clip(cos, -1.0, 1.0)


def consecutive_cosine(trace: Trace) -> np.ndarray:
    """Cosine similarity between the stream entering and leaving each block.  float32 [L, n]"""
    stack = residual_stack(trace)
    return cosine_rows(stack[:-1], stack[1:]).astype(np.float32)


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
                 chunk_elements: int = LENS_CHUNK_ELEMENTS, check=None) -> LensBlock:
    """The lens at positions ``start .. stop - 1`` only, every boundary (the same numbers as
    ``logit_lens`` there). ``check()`` is called between boundaries (it may raise to abandon the work)."""
    import torch

    from explorer.core.trace import as_tensor

    model = trace._model
    cfg, n = trace.config, trace.n_tokens
    start, stop = max(0, int(start)), min(n, int(stop))
    c = max(stop - start, 0)
    B = cfg.n_layers + 1
    param = next(model.parameters())
    V = int(model.unembed.weight.shape[0])
    limit = V if vocab_size is None else max(1, min(int(vocab_size), V))
    top = _top_of(model, top, vocab_size)
    chunk = max(1, int(chunk_elements) // V)
    t_end = min(stop, n - 1)  # positions with a real next token
    tc = max(t_end - start, 0)
    targets = torch.as_tensor(np.array(trace.token_ids[start + 1:t_end + 1]), dtype=torch.long, device=param.device)

    ids = np.zeros((B, c, top), dtype=np.int64)
    probs = np.zeros((B, c, top), dtype=np.float32)
    logits = np.zeros((B, c, top), dtype=np.float32)
    target_probs = np.zeros((B, tc), dtype=np.float32)
    target_ranks = np.zeros((B, tc), dtype=np.int64)
    entropy = np.zeros((B, c), dtype=np.float32)
    keys = [f"blocks.{layer}.resid_pre" for layer in range(cfg.n_layers)] + ["resid_final"]
    with torch.inference_mode():
        vocab_ids = torch.arange(V, device=param.device)
        for b, key in enumerate(keys):
            if check is not None:
                check()
            stream = trace[key]
            for lo in range(start, stop, chunk):
                hi = min(stop, lo + chunk)
                i, j = lo - start, hi - start
                x = as_tensor(stream[lo:hi]).to(device=param.device, dtype=param.dtype)[None]
                raw = model.final_logits(x)[0].float()                 # [c, V]
                if limit < V:
                    raw[:, limit:] = float("-inf")
                p = torch.softmax(raw, dim=-1)                          # max-subtracted: stable in float32
                top_ids = top_k_rows(raw, top)
                top_p = p.gather(-1, top_ids)
                ids[b, i:j] = _np(top_ids)
                probs[b, i:j] = _np(top_p)
                logits[b, i:j] = _np(raw.gather(-1, top_ids))
                # entropy -sum p ln p = lse - sum p * logit, with lse = logit - ln p of the top token
                lse = raw.gather(-1, top_ids[:, :1])[:, 0] - top_p[:, 0].log()
                finite = raw if limit == V else raw.nan_to_num(neginf=0.0)  # removed ids: p = 0
                entropy[b, i:j] = _np((lse - torch.linalg.vecdot(p, finite)).clamp_min(0.0))
                # the real next token of positions lo .. min(hi, n - 1) - 1
                t_hi = min(hi, n - 1)
                if t_hi > lo:
                    rows = raw[: t_hi - lo]
                    t = targets[lo - start:t_hi - start, None]
                    t_logit = rows.gather(-1, t)                        # [c, 1]
                    rank = (rows > t_logit).sum(-1)
                    tied = (rows == t_logit).sum(-1) > 1
                    if bool(tied.any()):                                # equal logits: lower ids rank first
                        rank += ((rows == t_logit) & (vocab_ids[None] < t)).sum(-1)
                    target_ranks[b, i:t_hi - start] = _np(rank)
                    target_probs[b, i:t_hi - start] = _np(p[: t_hi - lo].gather(-1, t)[:, 0])
    return LensBlock(start, stop, ids, probs, logits, target_probs, target_ranks, entropy)


def _np(t) -> np.ndarray:  # a torch tensor -> numpy on the CPU
    return t.detach().cpu().numpy()
