"""Autoregressive generation with the sampling controls, one inspectable step at a time (no Qt).

:func:`generate_steps` continues a prompt token by token and yields a :class:`Step` for every
token it chooses. Each step keeps the model's raw logits for that position in a
:class:`~explorer.core.generation.sampling.StepScores`, so the UI can show the distribution before and after
the controls and re-score the step with other controls without running the model again.

The loop:

* with ``use_cache=True`` (the default) the prompt runs through the model once (the *prefill*),
  its keys and values stay in a KV cache, and every later step runs only the newest token;
  with ``use_cache=False`` every step runs the whole sequence again (slower, same tokens: it is
  there to show what the cache saves). A bidirectional (non-causal) model always runs without
  the cache, because its earlier positions' keys change when a token is appended.
* the last position's logits are read in float32; if the model's embedding matrix is padded
  beyond the tokenizer's vocabulary, the padding ids get ``-inf`` so that they can never be
  chosen nor shown (``StepScores.logits`` holds these masked logits);
* :func:`~explorer.core.generation.sampling.apply_controls` processes them (the repetition penalty looks at
  the prompt and every token generated so far) and :func:`~explorer.core.generation.sampling.sample` picks
  the token, with one random stream ``make_rng(params.seed)`` for the whole generation, so a seed
  reproduces a run exactly.

Stopping. After each step, in this order:

``"eos"``
    the chosen token is the tokenizer's end-of-text token and ``params.stop_at_eos`` is set
    (the EOS step is yielded, but its token is not part of ``GenerationResult.text``);
``"stop_string"``
    the continuation's text contains one of ``params.stop_strings`` (the text keeps whole
    tokens: it ends with the token that completed the stop string);
``"max_new_tokens"``
    ``params.max_new_tokens`` tokens have been generated;
``"context_full"``
    the sequence (prompt plus continuation) has reached the model's context length ``n_ctx``.
    There is no sliding window: a learned-position model has no position beyond ``n_ctx - 1``,
    and silently dropping the start of the text would change what the model conditions on, so
    generation stops and says why. A prompt of exactly ``n_ctx`` tokens yields no step; a longer
    one is a :class:`~explorer.core.errors.PromptError`.

Before each step ``cancel`` (a ``Cancel``, a callable or a ``threading.Event``) is consulted; when it says
stop, generation ends with ``"cancelled"`` without starting another forward pass.

:func:`generate_steps` *returns* its :class:`GenerationResult` (``StopIteration.value``, or the
value of ``yield from``); :func:`generate` runs the whole loop and returns it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from explorer.core.analysis.ranking import rank_of
from explorer.core.cancel import CancelLike, asker
from explorer.core import arguments
from explorer.core.errors import ArgumentError, PromptError
from explorer.core.interventions.apply import Intervener, resolve
from explorer.core.interventions.spec import Intervention
from explorer.core.model import KVCache, _no_capture
from explorer.core.generation.sampling import (
    Distribution,
    SamplingParams,
    StepScores,
    apply_controls,
    make_rng,
    sample,
)

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel
    from explorer.core.tokenize.base import Tokenizer

__all__ = [
    "STOP_REASONS",
    "GenerationResult",
    "IncrementalText",
    "PreallocatedKVCache",
    "Step",
    "StopReason",
    "continuation_text",
    "generate",
    "generate_steps",
]

StopReason = Literal["max_new_tokens", "eos", "stop_string", "context_full", "cancelled", "nonfinite"]
STOP_REASONS: tuple[str, ...] = ("max_new_tokens", "eos", "stop_string", "context_full", "cancelled", "nonfinite")
STOP_DESCRIPTIONS = {
    "max_new_tokens": "reached the maximum number of new tokens",
    "eos": "the model produced the end-of-text token",
    "stop_string": "the continuation contains a stop string",
    "context_full": "the text filled the model's context window (no sliding window)",
    "cancelled": "cancelled",
    "nonfinite": "the model produced NaN or infinite logits",
}



# --- one step ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Step:
    """One generated token and everything needed to explain the choice.

    Attributes
    ----------
    index
        0-based number of the step (the ``index``-th new token).
    token_id, text
        The chosen token and its display string (``tokenizer.display``: its text, or ``\\xNN``
        for bytes that are only part of a character).
    scores
        The raw last-position logits (float32 ``[V]``, vocabulary padding at ``-inf``), the
        controls, the context ids before this step and the chosen id: enough to re-score.
    prob, rank
        Probability and 0-based rank (whole vocabulary, ties by lower id) of the chosen token
        under the controls that were used.
    elapsed
        Seconds this step took: forward pass (the prefill, for step 0 with the cache), reading
        the logits, controls and sampling.
    """

    index: int
    token_id: int
    text: str
    scores: StepScores
    prob: float
    rank: int
    elapsed: float

    @property
    def params(self) -> SamplingParams:
        return self.scores.params

    @cached_property
    def model_prob(self) -> float:
        """The chosen token's probability under the model alone (no controls): under greedy decoding or a
        small top-k, ``prob`` (after the controls) is 1 or near it for every token, which says nothing."""
        x = np.asarray(self.scores.logits, dtype=np.float64)
        top = float(np.max(x))
        return float(np.exp(x[self.token_id] - top) / np.exp(x - top).sum())

    @property
    def position(self) -> int:
        """Position of the chosen token in the whole sequence (prompt tokens come first)."""
        return len(self.scores.previous_ids)

    def distributions(self, n: int = 20, params: SamplingParams | None = None) -> tuple[Distribution, Distribution]:
        """``(before, after)``: top-``n`` of the model's own distribution and of the one left by the
        controls (``params``, default the recorded ones). Computed from the stored logits only."""
        return self.scores.rescore(params, n)

    @cached_property
    def before(self) -> Distribution:
        """Top 20 of the raw distribution (no controls), with the chosen token's raw rank/prob."""
        return self._top20[0]

    @cached_property
    def after(self) -> Distribution:
        """Top 20 of the distribution under the recorded controls."""
        return self._top20[1]

    @cached_property
    def _top20(self) -> tuple[Distribution, Distribution]:
        return self.scores.rescore(None, 20)


@dataclass(frozen=True, eq=False)
class GenerationResult:
    """What a finished generation produced and why it stopped.

    ``text`` is the continuation only (the prompt's text is not repeated), decoded from the new
    tokens; a final EOS token (stop reason ``"eos"``) is left out of it.
    """

    text: str
    prompt_ids: tuple[int, ...]
    steps: tuple[Step, ...]
    stop_reason: StopReason
    elapsed: float = 0.0  # seconds spent in the steps (time the consumer took between steps excluded)
    detail: str = ""  # the stop reason in words when it says more than STOP_DESCRIPTIONS (e.g. which step)
    interventions: tuple = ()  # the (resolved) interventions active during the generation

    @property
    def token_ids(self) -> list[int]:
        """Every chosen id, the final EOS included."""
        return [s.token_id for s in self.steps]

    @property
    def n_new(self) -> int:
        return len(self.steps)

    @property
    def tokens_per_second(self) -> float:
        return len(self.steps) / self.elapsed if self.elapsed > 0 else float("nan")

    @property
    def stop_description(self) -> str:
        return self.detail or STOP_DESCRIPTIONS[self.stop_reason]


# --- text of a continuation -------------------------------------------------------------------

def continuation_text(tokenizer: Tokenizer, prompt_ids: Sequence[int], new_ids: Sequence[int],
                      prompt_text: str | None = None) -> str:
    """The text the new tokens add after the prompt.

    Decoding prompt and continuation together gets the joins right (a word vocabulary puts a
    space between words; a byte-level BPE may finish a character across the boundary).
    """
    if not new_ids:
        return ""
    prompt_text = tokenizer.decode(list(prompt_ids)) if prompt_text is None else prompt_text
    full = tokenizer.decode(list(prompt_ids) + list(new_ids))
    if full.startswith(prompt_text):
        return full[len(prompt_text):]
    return tokenizer.decode(list(new_ids))


class IncrementalText:
    """Streams a continuation as text: ``push(token_id)`` returns the characters it makes printable.

    A trailing U+FFFD (a character whose bytes have not all arrived yet) is held back until the
    next token completes it, so what was printed is never taken back.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.prompt_ids = list(prompt_ids)
        self.prompt_text = tokenizer.decode(self.prompt_ids)
        self.ids: list[int] = []
        self.printed = ""

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = continuation_text(self.tokenizer, self.prompt_ids, self.ids, self.prompt_text)
        stable = text.rstrip("\ufffd")
        if not stable.startswith(self.printed):  # cannot happen with prefix-stable decoders
            return ""
        delta, self.printed = stable[len(self.printed):], stable
        return delta

    def flush(self) -> str:
        """Whatever is still held back (incomplete characters at the very end)."""
        text = continuation_text(self.tokenizer, self.prompt_ids, self.ids, self.prompt_text)
        delta = text[len(self.printed):] if text.startswith(self.printed) else ""
        self.printed += delta
        return delta


# --- a KV cache that does not copy itself every step ------------------------------------------

class PreallocatedKVCache(KVCache):
    """A :class:`~explorer.core.model.KVCache` whose keys and values live in buffers sized for the
    whole generation, so appending a token writes one position instead of copying the cache
    (``torch.cat``) in every layer at every step. ``keys[l]``/``values[l]`` are views of the
    filled part, exactly what the plain cache would hold. Grows (by doubling) if it must.
    """

    def __init__(self, n_layers: int, capacity: int) -> None:
        super().__init__(n_layers)
        self.capacity = max(1, int(capacity))
        self._k: list[torch.Tensor | None] = [None] * n_layers
        self._v: list[torch.Tensor | None] = [None] * n_layers
        self._len = [0] * n_layers

    def seen(self, layer: int) -> int:
        if self.states[layer] is not None:  # a recurrent layer's state (core/mixers/)
            return self.states[layer].length
        return self._len[layer]

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._len[layer]
        end = start + k.shape[-2]
        kb, vb = self._k[layer], self._v[layer]
        if kb is None or end > kb.shape[-2]:
            size = max(end, self.capacity if kb is None else 2 * kb.shape[-2])
            new_k = k.new_empty(*k.shape[:-2], size, k.shape[-1])
            new_v = v.new_empty(*v.shape[:-2], size, v.shape[-1])
            if kb is not None:
                new_k[..., :start, :] = kb[..., :start, :]
                new_v[..., :start, :] = vb[..., :start, :]
            kb, vb = self._k[layer], self._v[layer] = new_k, new_v
        kb[..., start:end, :] = k
        vb[..., start:end, :] = v
        self._len[layer] = end
        self.keys[layer], self.values[layer] = kb[..., :end, :], vb[..., :end, :]
        return self.keys[layer], self.values[layer]


# --- the loop ---------------------------------------------------------------------------------

def _chosen_rank_prob(x: np.ndarray, token_id: int) -> tuple[int, float]:
    """Rank (ties: lower id first) and probability of ``token_id`` in processed logits ``x``."""
    finite = np.isfinite(x)
    if np.count_nonzero(finite) == 1:  # greedy, or controls that leave one token
        return 0, 1.0
    e = np.exp(x - x.max())
    prob = float(e[token_id] / e.sum())
    return rank_of(x, token_id), prob


def _check_loaded(loaded: object) -> None:
    from explorer.core.loaded import LoadedModel  # (not at the top: the loaded model's module is heavier)

    arguments.instance(loaded, LoadedModel, "loaded", "a LoadedModel (from load_checkpoint)")


def _check_prompt(loaded: LoadedModel, prompt_ids: Sequence[int]) -> list[int]:
    """The ids as ints in the vocabulary (1.5 or 'a' refused, never rounded), leaving room in the context."""
    if isinstance(prompt_ids, (list, tuple)) and not prompt_ids:
        raise PromptError("the prompt is empty: give at least one token to continue")
    ids = arguments.checked_ids(prompt_ids, loaded.config.vocab_size, 1 << 62)  # the context's own line below
    n_ctx = loaded.config.n_ctx
    if len(ids) > n_ctx:
        raise PromptError(f"the prompt has {len(ids)} tokens but the model's context holds {n_ctx}: "
                          "shorten it to leave room for the continuation")
    return ids


def generate_steps(
    loaded: LoadedModel,
    prompt_ids: Sequence[int],
    params: SamplingParams | None = None,
    cancel: CancelLike = None,
    use_cache: bool = True,
    on_overflow: str = "stop",
    interventions: Sequence[Intervention] = (),
) -> Generator[Step, None, GenerationResult]:
    """Continue ``prompt_ids``, yielding one :class:`Step` per new token; returns the
    :class:`GenerationResult` (see the module docstring for the stop rules).

    ``interventions`` (explorer/core/interventions/) are active in every forward pass; a mean
    ablation uses the mean over the prompt's positions, fixed for the whole generation.

    ``on_overflow`` says what happens when the sequence reaches the context length; only
    ``"stop"`` (stop with reason ``"context_full"``) exists.
    """
    if on_overflow != "stop":
        raise ArgumentError(f"on_overflow must be 'stop' (no sliding window is offered), got {on_overflow!r:.40}")
    params = SamplingParams() if params is None else params
    _check_loaded(loaded)
    arguments.instance(params, SamplingParams, "params", "a SamplingParams")
    asker(cancel)
    interventions = arguments.sequence_of(interventions, Intervention, "interventions", "Intervention")
    prompt = _check_prompt(loaded, prompt_ids)
    ivs = resolve(loaded.model, prompt, interventions) if interventions else ()
    return (yield from _loop(loaded, prompt, params, asker(cancel), use_cache, ivs))


def _loop(loaded: LoadedModel, prompt: list[int], params: SamplingParams, cancelled: Callable[[], bool],
          use_cache: bool, ivs: tuple[Intervention, ...] = ()) -> Generator[Step, None, GenerationResult]:
    model, tokenizer, cfg = loaded.model, loaded.tokenizer, loaded.config
    device = loaded.device
    n_ctx = cfg.n_ctx
    use_cache = use_cache and cfg.causal
    vocab_limit = tokenizer.vocab_size if tokenizer.vocab_size < cfg.vocab_size else None
    ends = {i for i in (tokenizer.eos_id, *params.stop_token_ids) if i is not None} if params.stop_at_eos else set()
    stops = params.stop_strings
    prompt_text = tokenizer.decode(prompt) if stops else ""
    rng = make_rng(params.seed)
    greedy = params.greedy

    ids = list(prompt)
    steps: list[Step] = []
    cache = PreallocatedKVCache(cfg.n_layers, min(n_ctx, len(prompt) + params.max_new_tokens)) if use_cache else None
    reason: StopReason | None = "context_full" if len(ids) >= n_ctx else None
    detail = ""

    while reason is None:
        if cancelled():
            reason = "cancelled"
            break
        t0 = time.perf_counter()
        fresh = ids if cache is None or cache.length == 0 else ids[cache.length:]
        with torch.inference_mode():
            tokens = torch.tensor([fresh], dtype=torch.long, device=device)
            start = len(ids) - len(fresh)  # absolute position of the first token run now
            rec = Intervener([ivs], cfg.n_layers, start=start) if ivs else _no_capture
            last = model(tokens, rec, cache=cache, last_only=True)[0, -1]
            if vocab_limit is not None:
                last[vocab_limit:] = float("-inf")
            logits = last.float().cpu().numpy()
        top = float(logits.max())  # NaN if any logit is NaN
        if top != top or top == float("inf"):  # shown, not raised: the run ends here
            reason = "nonfinite"
            detail = (f"the model produced {'NaN' if np.isnan(logits).any() else 'an infinite logit'} at step "
                      f"{len(steps)}")
            break
        if greedy and params.repetition_penalty == 1.0 and top > float("-inf"):
            # what apply_controls then argmax would give (one finite token left, lowest id on ties),
            # without its passes over the vocabulary
            token, rank, prob = int(np.argmax(logits)), 0, 1.0
        else:
            processed = apply_controls(logits, params, ids)
            # greedy: sample() would only check ``processed`` again and take its argmax (lowest id on ties)
            token = int(np.argmax(processed)) if greedy else sample(processed, rng)
            rank, prob = _chosen_rank_prob(processed, token)
        scores = StepScores(logits, params, ids, token)
        ids.append(token)
        step = Step(index=len(steps), token_id=token, text=tokenizer.display(token), scores=scores,
                    prob=prob, rank=rank, elapsed=time.perf_counter() - t0)
        steps.append(step)
        yield step

        if token in ends:
            reason = "eos"
        elif stops and _contains_any(continuation_text(tokenizer, prompt, ids[len(prompt):], prompt_text), stops):
            reason = "stop_string"
        elif len(steps) >= params.max_new_tokens:
            reason = "max_new_tokens"
        elif len(ids) >= n_ctx:
            reason = "context_full"

    new_ids = ids[len(prompt):]
    if reason == "eos":
        new_ids = new_ids[:-1]
    text = continuation_text(tokenizer, prompt, new_ids)
    return GenerationResult(text, tuple(prompt), tuple(steps), reason, sum(s.elapsed for s in steps),
                            detail=detail, interventions=ivs)


def _contains_any(text: str, needles: Sequence[str]) -> bool:
    return any(needle in text for needle in needles)


def generate(
    loaded: LoadedModel,
    prompt: str | Sequence[int],
    params: SamplingParams | None = None,
    cancel: CancelLike = None,
    use_cache: bool = True,
    on_overflow: str = "stop",
    on_step: Callable[[Step], None] | None = None,
    interventions: Sequence[Intervention] = (),
) -> GenerationResult:
    """Run a whole generation; ``prompt`` is text (encoded with the model's tokenizer) or token ids.
    ``on_step`` is called with each :class:`Step` as it is produced (for streaming)."""
    _check_loaded(loaded)
    arguments.function(on_step, "on_step")
    if prompt is None or isinstance(prompt, bytes) or not isinstance(prompt, (str, Sequence)):
        raise ArgumentError(f"prompt must be text or a list of token ids, not a {type(prompt).__name__}")
    blocked = getattr(loaded, "generation_blocked", None)
    if blocked:  # an encoder (BERT): its logits fill in masks, they do not predict a next token
        raise PromptError(f"cannot generate: {blocked}")
    if isinstance(prompt, str):
        if not prompt:
            raise PromptError("the prompt is empty: type some text to continue")
        prompt_ids = loaded.tokenizer.encode(prompt)
        if not prompt_ids:
            raise PromptError("the prompt has no tokens in this model's vocabulary")
    else:
        prompt_ids = list(prompt)
    steps = generate_steps(loaded, prompt_ids, params, cancel, use_cache, on_overflow, interventions)
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            return done.value
        if on_step is not None:
            on_step(step)
