"""Sampling controls for next-token choice, in pure numpy (no torch, no Qt).

The model gives one vector of raw logits ``[V]`` per step. :func:`apply_controls`
turns it into processed logits, where every token that the controls remove is
``-inf``. The controls always run in this fixed order:

1. **repetition penalty** on every token id in ``previous_ids`` (each id once,
   however often it occurs): a positive logit is divided by the penalty, a
   negative one multiplied (the CTRL / Hugging Face rule);
2. **temperature**: logits are divided by ``T``; ``T == 0`` is greedy and keeps
   only the argmax (its logit unchanged; ties go to the lowest id);
3. **top-k**: removes every token whose logit is below the k-th highest one
   (tokens tied with the k-th are all kept);
4. **top-p** (nucleus): keeps the smallest set of highest-probability tokens
   whose cumulative probability reaches ``top_p``, and always at least one
   token (among tied logits the lower id counts as the higher-ranked);
5. **min-p**: removes tokens whose probability is below ``min_p`` times the
   probability of the most likely token.

Each step sees the result of the steps before it, renormalised (a removed token
has probability 0). A control at its "off" value (penalty 1, top-k 0, top-p 1,
min-p 0) is skipped. The results equal those of Hugging Face transformers'
``RepetitionPenaltyLogitsProcessor``, ``TemperatureLogitsWarper``,
``TopKLogitsWarper``, ``TopPLogitsWarper`` and ``MinPLogitsWarper`` applied in
that order with ``min_tokens_to_keep=1``.

:func:`sample` draws one token from processed logits; :class:`StepScores`
keeps a recorded step's raw logits so that the UI can re-score it with other
controls without running the model again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from explorer.core.analysis.ranking import rank_of, top_k_ids
from explorer.core.errors import ArgumentError  # also a ValueError, as these checks raised before

__all__ = [
    "Distribution",
    "SamplingParams",
    "StepScores",
    "apply_controls",
    "make_rng",
    "next_token",
    "sample",
    "softmax",
    "top_candidates",
]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


@dataclass(frozen=True)
class SamplingParams:
    """Controls for choosing the next token.

    Parameters
    ----------
    temperature
        Divides the logits; 0 means greedy (argmax). Must be >= 0.
    top_k
        Keep only the k most likely tokens; 0 turns it off.
    top_p
        Nucleus threshold in (0, 1]; 1 turns it off.
    min_p
        Relative probability floor in [0, 1); 0 turns it off.
    repetition_penalty
        > 0; 1 turns it off, > 1 discourages tokens already in the context.
    seed
        Seed for the random generator (None: fresh entropy). Must be >= 0.
    max_new_tokens
        How many tokens a generation produces at most (>= 1).
    stop_at_eos
        Stop when the end-of-text token is produced.
    stop_strings
        Stop when the generated text contains one of these (non-empty) strings.
    stop_token_ids
        Token ids that end the text like the end-of-text token (a chat template's end-of-turn tokens),
        with the same ``stop_at_eos`` switch.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 64
    stop_at_eos: bool = True
    stop_strings: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repetition_penalty"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value):
                raise ArgumentError(f"{name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        for name in ("top_k", "max_new_tokens"):
            value = getattr(self, name)
            if not _is_int(value):
                raise ArgumentError(f"{name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.temperature < 0:
            raise ArgumentError(
                f"temperature must be >= 0 (0 means greedy), got {self.temperature}"
            )
        if self.top_k < 0:
            raise ArgumentError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ArgumentError(f"top_p must be in (0, 1] (1 turns it off), got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ArgumentError(f"min_p must be in [0, 1) (0 turns it off), got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise ArgumentError(
                "repetition_penalty must be > 0 (1 turns it off), "
                f"got {self.repetition_penalty}"
            )
        if self.max_new_tokens < 1:
            raise ArgumentError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.seed is not None:
            if not _is_int(self.seed) or self.seed < 0:
                raise ArgumentError(f"seed must be None or an integer >= 0, got {self.seed!r}")
            object.__setattr__(self, "seed", int(self.seed))
        if not isinstance(self.stop_at_eos, (bool, np.bool_)):
            raise ArgumentError(f"stop_at_eos must be True or False, got {self.stop_at_eos!r}")
        object.__setattr__(self, "stop_at_eos", bool(self.stop_at_eos))
        if isinstance(self.stop_strings, str):
            raise ArgumentError(
                "stop_strings must be a sequence of strings, not a single string: "
                f"use ({self.stop_strings!r},)"
            )
        try:
            stops = tuple(self.stop_strings)
        except TypeError:
            raise ArgumentError(
                f"stop_strings must be a sequence of strings, got {self.stop_strings!r}"
            ) from None
        for stop in stops:
            if not isinstance(stop, str) or not stop:
                raise ArgumentError(f"stop_strings must hold non-empty strings, got {stop!r}")
        try:
            stop_ids = None if isinstance(self.stop_token_ids, (str, bytes)) else tuple(self.stop_token_ids)
        except TypeError:  # not a sequence
            stop_ids = None
        if stop_ids is None or not all(_is_int(i) and i >= 0 for i in stop_ids):
            raise ArgumentError(f"stop_token_ids must hold token ids (whole numbers >= 0), got {self.stop_token_ids!r:.80}")
        object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in stop_ids))
        object.__setattr__(self, "stop_strings", stops)

    @property
    def greedy(self) -> bool:
        """True when temperature is 0: the most likely token is always chosen."""
        return self.temperature == 0.0

    def replace(self, **changes: object) -> SamplingParams:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _as_logits(logits: np.ndarray) -> np.ndarray:
    """Validate a logits vector and return it as a new float64 array."""
    x = np.array(logits, dtype=np.float64, copy=True)
    if x.ndim != 1 or x.size == 0:
        raise ArgumentError(f"logits must be a non-empty 1-D vector, got shape {x.shape}")
    if np.isnan(x).any():
        raise ArgumentError("the logits contain NaN (the model produced non-finite values): no token can be chosen")
    if np.isposinf(x).any():
        raise ArgumentError("the logits contain +inf (the model produced non-finite values): no token can be chosen")
    if not np.isfinite(x).any():
        raise ArgumentError("logits are all -inf: no token can be chosen")
    return x


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D logits vector, as float64.

    ``-inf`` entries get probability exactly 0. Raises ValueError when every
    entry is ``-inf`` or any is NaN / ``+inf``.
    """
    x = _as_logits(logits)
    return _softmax_unchecked(x)


def _softmax_unchecked(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())  # max is finite: exp(-inf) == 0, the max gives 1
    return e / e.sum()


def _repetition_penalty(x: np.ndarray, previous_ids: Sequence[int], penalty: float) -> None:
    ids = np.asarray(previous_ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        return
    if (ids < 0).any():
        raise ArgumentError(f"previous_ids must be >= 0, got {int(ids.min())}")
    ids = np.unique(ids[ids < x.size])  # ids beyond the vocabulary cannot be produced
    values = x[ids]
    with np.errstate(over="ignore"):
        penalised = np.where(values < 0, values * penalty, values / penalty)
    overflow = np.isposinf(penalised) & np.isfinite(values)
    if overflow.any():  # a penalty near 0: in the limit only the largest of these tokens is left
        top = values[overflow].max()
        keep = ids[overflow & (values == top)]
        x[:] = -np.inf
        x[keep] = 0.0
        return
    x[ids] = penalised


def _keep_argmax(x: np.ndarray) -> None:
    best = int(np.argmax(x))  # first occurrence: ties go to the lowest id
    value = x[best]
    x[:] = -np.inf
    x[best] = value


def _top_k(x: np.ndarray, k: int) -> None:
    k = min(k, x.size)
    kth = np.partition(x, x.size - k)[x.size - k]  # the k-th largest value
    x[x < kth] = -np.inf


def _top_p(x: np.ndarray, top_p: float) -> None:
    idx = np.flatnonzero(np.isfinite(x))
    # Ascending by logit; among ties the higher id first, so it is dropped first.
    order = idx[np.lexsort((-idx, x[idx]))]
    values = x[order]
    probs = np.exp(values - values[-1])
    probs /= probs.sum()
    cumulative = np.cumsum(probs)
    remove = cumulative <= 1.0 - top_p
    remove[-1] = False  # always keep the most likely token
    x[order[remove]] = -np.inf


def _min_p(x: np.ndarray, min_p: float) -> None:
    probs = _softmax_unchecked(x)
    remove = probs < min_p * probs.max()
    remove[int(np.argmax(probs))] = False
    x[remove] = -np.inf


def apply_controls(
    logits: np.ndarray, params: SamplingParams, previous_ids: Sequence[int] = ()
) -> np.ndarray:
    """Apply the sampling controls to one step's logits.

    Parameters
    ----------
    logits
        Raw logits, shape ``[V]`` (any float dtype; the input is not modified).
    params
        The controls; see the module docstring for the order they run in.
    previous_ids
        Token ids already in the context (prompt and generated so far), for the
        repetition penalty. Ids ``>= V`` are ignored; negative ids raise.

    Returns
    -------
    numpy.ndarray
        float64 processed logits of shape ``[V]``; removed tokens are ``-inf``,
        at least one entry is finite.
    """
    x = _as_logits(logits)
    if params.repetition_penalty != 1.0:
        _repetition_penalty(x, previous_ids, params.repetition_penalty)
    if params.greedy:
        _keep_argmax(x)
    elif params.temperature != 1.0:
        finite = np.isfinite(x)
        with np.errstate(over="ignore"):
            scaled = x / params.temperature
        if np.isfinite(scaled[finite]).all():
            x = scaled
        else:  # a temperature so small that the logits overflow: its limit, greedy
            _keep_argmax(x)
    if params.top_k > 0:
        _top_k(x, params.top_k)
    if params.top_p < 1.0:
        _top_p(x, params.top_p)
    if params.min_p > 0.0:
        _min_p(x, params.min_p)
    return x


def make_rng(seed: int | None = None) -> np.random.Generator:
    """Return a numpy Generator; the same seed gives the same stream of draws."""
    if seed is not None and (not _is_int(seed) or seed < 0):
        raise ArgumentError(f"seed must be None or an integer >= 0, got {seed!r}")
    return np.random.default_rng(None if seed is None else int(seed))


def sample(
    processed_logits: np.ndarray,
    rng: np.random.Generator | None = None,
    *,
    greedy: bool = False,
) -> int:
    """Choose one token id from processed logits.

    With ``greedy=True`` the argmax is returned (ties: lowest id) and ``rng`` is
    not used. Otherwise exactly one uniform number is drawn from ``rng`` per call,
    even when only one token is left, so that step ``t`` of a generation always
    uses the ``t``-th draw of the stream whatever the controls remove.
    """
    x = _as_logits(processed_logits)
    if greedy:
        return int(np.argmax(x))
    if rng is None:
        raise ArgumentError("sample() needs an rng unless greedy=True")
    u = rng.random()
    probs = _softmax_unchecked(x)
    cdf = np.cumsum(probs)
    index = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    last_possible = int(np.flatnonzero(probs > 0)[-1])
    return min(index, last_possible)


def next_token(
    logits: np.ndarray,
    params: SamplingParams,
    previous_ids: Sequence[int] = (),
    rng: np.random.Generator | None = None,
) -> int:
    """Apply the controls to raw logits and choose a token (greedy when ``params.greedy``)."""
    return sample(apply_controls(logits, params, previous_ids), rng, greedy=params.greedy)


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _check_token(token_id: int, vocab_size: int) -> int:
    if not _is_int(token_id) or not 0 <= token_id < vocab_size:
        raise ArgumentError(f"token id must be in [0, {vocab_size}), got {token_id!r}")
    return int(token_id)


@dataclass(frozen=True, eq=False)
class Distribution:
    """The top-N candidates of one next-token distribution, most likely first.

    Attributes
    ----------
    ids, logits, probs
        Read-only arrays ``[N]``: token ids (int64), their logits and their
        probabilities under the full distribution (float64). Ties are ordered by
        lower id. Removed (``-inf``) tokens never appear.
    vocab_size
        ``V``, the length of the full vector.
    num_possible
        How many tokens have a finite logit (could still be chosen).
    entropy
        Entropy of the full distribution in nats.
    chosen_id, chosen_rank, chosen_prob
        Optional: the token actually chosen, its 0-based rank in the whole
        vocabulary (None if it was removed) and its probability.
    """

    ids: np.ndarray
    logits: np.ndarray
    probs: np.ndarray
    vocab_size: int
    num_possible: int
    entropy: float
    chosen_id: int | None = None
    chosen_rank: int | None = None
    chosen_prob: float | None = None

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def covered_mass(self) -> float:
        """Total probability of the listed candidates."""
        return float(self.probs.sum())

    def rank_of(self, token_id: int) -> int | None:
        """0-based position of ``token_id`` among the candidates, or None if not listed."""
        hits = np.flatnonzero(self.ids == token_id)
        return int(hits[0]) if hits.size else None

    def prob_of(self, token_id: int) -> float | None:
        """Probability of ``token_id`` if it is listed, else None."""
        rank = self.rank_of(token_id)
        return None if rank is None else float(self.probs[rank])


def top_candidates(
    logits: np.ndarray, n: int = 20, chosen_id: int | None = None
) -> Distribution:
    """Return the ``n`` most likely tokens of ``softmax(logits)``.

    ``logits`` may contain ``-inf`` (removed tokens, left out of the list).
    ``chosen_id``, if given, fills the ``chosen_*`` fields.
    """
    if not _is_int(n) or n < 0:
        raise ArgumentError(f"n must be an integer >= 0, got {n!r}")
    x = _as_logits(logits)
    probs = _softmax_unchecked(x)
    order = top_k_ids(x, int(n), finite_only=True)
    positive = probs[probs > 0]
    entropy = float(-(positive * np.log(positive)).sum())
    rank = prob = None
    if chosen_id is not None:
        chosen_id = _check_token(chosen_id, x.size)
        prob = float(probs[chosen_id])
        rank = rank_of(x, chosen_id) if np.isfinite(x[chosen_id]) else None
    return Distribution(
        ids=_readonly(order),
        logits=_readonly(x[order]),
        probs=_readonly(probs[order]),
        vocab_size=int(x.size),
        num_possible=int(np.count_nonzero(np.isfinite(x))),
        entropy=entropy,
        chosen_id=chosen_id,
        chosen_rank=rank,
        chosen_prob=prob,
    )


@dataclass(frozen=True, eq=False)
class StepScores:
    """One recorded generation step, re-scorable with other controls.

    Attributes
    ----------
    logits
        The model's raw logits ``[V]`` (kept as a read-only float32 copy).
    params
        The controls that were used at this step.
    previous_ids
        The context token ids at this step (for the repetition penalty).
    chosen_id
        The token that was chosen, if known.
    """

    logits: np.ndarray
    params: SamplingParams = field(default_factory=SamplingParams)
    previous_ids: tuple[int, ...] = ()
    chosen_id: int | None = None

    def __post_init__(self) -> None:
        raw = np.array(self.logits, dtype=np.float32, copy=True)
        _as_logits(raw)  # same checks as everywhere else
        object.__setattr__(self, "logits", _readonly(raw))
        object.__setattr__(self, "previous_ids", tuple(int(i) for i in self.previous_ids))
        if self.chosen_id is not None:
            object.__setattr__(self, "chosen_id", _check_token(self.chosen_id, raw.size))

    @property
    def vocab_size(self) -> int:
        return int(self.logits.size)

    def processed(self, params: SamplingParams | None = None) -> np.ndarray:
        """Processed logits under ``params`` (default: the recorded ones)."""
        return apply_controls(
            self.logits, self.params if params is None else params, self.previous_ids
        )

    def rescore(
        self, params: SamplingParams | None = None, n: int = 20
    ) -> tuple[Distribution, Distribution]:
        """Return ``(before, after)`` top-``n`` distributions.

        ``before`` is the model's own distribution (softmax of the raw logits, no
        controls); ``after`` is the distribution left by the controls ``params``
        (default: the recorded ones). Both carry the ``chosen_*`` fields when
        ``chosen_id`` is known.
        """
        before = top_candidates(self.logits, n, self.chosen_id)
        after = top_candidates(self.processed(params), n, self.chosen_id)
        return before, after

    def rank_and_prob(
        self, token_id: int, params: SamplingParams | None = None
    ) -> tuple[int | None, float]:
        """0-based rank and probability of ``token_id`` under ``params``.

        The rank is over the whole vocabulary (ties: lower id first) and is None
        when the controls remove the token, whose probability is then 0.
        """
        token_id = _check_token(token_id, self.vocab_size)
        x = self.processed(params)
        if not np.isfinite(x[token_id]):
            return None, 0.0
        return rank_of(x, token_id), float(_softmax_unchecked(x)[token_id])
