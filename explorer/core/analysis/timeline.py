"""A generation as a timeline: the model at step t, and the journey of the token chosen there (no Qt).

In a causal model, position i sees only positions 0..i, so one trace of the whole sequence (the
prompt and every generated token) holds the trace of every shorter prefix: the trace of the prompt
plus the first t generated tokens is the first ``n_prompt + t`` positions of every stored array
(``trace_at_step``; queries and keys alike for the n x n scores and patterns). Whatever the sliced
trace derives (patterns from q and k, a block re-run from its input, the lens) it derives from
those same numbers with the model, as a fresh trace would. Step t's last position is the one that
predicts generated token t, the token being produced at step t.

It does not hold where a position's numbers depend on how long the sequence is: encoders (every
position sees every other), RoPE scaling whose frequencies follow the sequence length (``dynamic``,
``longrope``) and mean-ablations (a mean over the positions): ``why_not_sliceable`` says so, and
the caller traces each step afresh instead.

``journey(trace, n_prompt, t)``: the token produced at step t, its rank and probability at every
layer boundary (the logit lens at the position that predicts it), and for each layer and head the
attention that position pays to every earlier token, with the ``top`` tokens it reads most;
``control_stages(step.scores)``: which sampling controls changed the choice (the chosen token's rank and
probability after each control that was on, in the order they run).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from explorer.core.trace import Trace

LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")
_PER_HEAD = ("attn.q", "attn.k", "attn.v", "attn.z", "attn.sink")        # [H, n, dh] (a sink: [H, n])
_SQUARE = ("attn.scores", "attn.scores_precap", "attn.pattern")          # [H, n, n]
_HEAD_STATS = ("attn.q_norm.", "attn.k_norm.")                           # [H, n] or [n]


def why_not_sliceable(trace: Trace) -> str | None:
    """Why the prefix of this trace is not the trace of the prefix (None: it is)."""
    cfg = trace.config
    if not cfg.causal:
        return "this model is an encoder: every position sees the whole sequence, so each step needs its own trace"
    kind = cfg.rope.get("rope_type", "default")
    if kind in LENGTH_DEPENDENT_ROPE:
        return f"its RoPE scaling ({kind}) depends on the sequence length, so each step needs its own trace"
    if any(getattr(i, "mode", None) == "mean" for i in trace.interventions):
        return "a mean-ablation averages over the positions, so each step needs its own trace"
    return None


def _slice(key: str, array: np.ndarray, m: int) -> np.ndarray:
    site = key.split(".", 2)[2] if key.startswith("blocks.") else key
    if site in _SQUARE:
        return array[:, :m, :m]
    if site in _PER_HEAD or (site.startswith(_HEAD_STATS) and array.ndim == 2):
        return array[:, :m]
    return array[:m]


def prefix_trace(trace: Trace, m: int) -> Trace:
    """The trace of the first ``m`` tokens, cut from ``trace`` (views, no copies; see the module docstring)."""
    from explorer.core.trace import Trace

    reason = why_not_sliceable(trace)
    if reason is not None:
        raise ValueError(reason)
    if not 1 <= m <= trace.n_tokens:
        raise ValueError(f"a prefix of 1..{trace.n_tokens} tokens, not {m}")
    if m == trace.n_tokens:
        return trace
    arrays = {key: _slice(key, trace._arrays[key], m) for key in trace.stored_keys()}
    meta = trace.meta if trace.meta.chat is None else replace(trace.meta, chat=trace.meta.chat.cut(m))  # its turns
    return Trace(trace.token_ids[:m], trace.tokens[:m], trace.config, arrays, meta, trace._model,
                 trace.interventions)


def estimate_nbytes(trace: Trace, n_tokens: int) -> int:
    """What a trace like ``trace`` (the same model, capture and storage) of ``n_tokens`` tokens stores:
    each stored array scaled by its length (the n x n scores and patterns by its square)."""
    n, total = max(1, trace.n_tokens), 0
    for key in trace.stored_keys():
        array = trace._arrays[key]
        site = key.split(".", 2)[2] if key.startswith("blocks.") else key
        scale = (n_tokens / n) ** 2 if site in _SQUARE else n_tokens / n
        total += int(int(array.nbytes) * scale)
    return total + 8 * int(n_tokens)


def trace_at_step(trace: Trace, n_prompt: int, t: int) -> Trace:
    """The model at step t of a generation: the prompt (``n_prompt`` tokens) plus the first ``t``
    generated tokens, from one trace of the whole sequence."""
    return prefix_trace(trace, n_prompt + t)


@dataclass(frozen=True, eq=False)
class Journey:
    """The token produced at step t (at sequence position ``position``, predicted at ``position - 1``)."""

    step: int
    position: int              # where the produced token sits in the sequence
    token_id: int
    labels: tuple[str, ...]    # the L + 1 lens boundaries
    ranks: np.ndarray          # [L + 1] its 0-based rank at each boundary (the last: the model's output)
    probs: np.ndarray          # [L + 1] its probability there
    attention: np.ndarray      # [L, H, position]: what the predicting position reads, every earlier token (reads_of)
    top_sources: np.ndarray    # [L, H, top]: the positions it reads most, most first (ties: the earlier)

    def first_top_layer(self) -> int | None:
        """The first boundary from which the token is the top prediction at every later one (None: never)."""
        top = self.ranks == 0
        stays = np.flip(np.logical_and.accumulate(np.flip(top)))
        return int(np.argmax(stays)) if stays[-1] else None


def reads_of(trace: Trace, q: int, position: int) -> np.ndarray:
    """[L, H, position]: what query ``q`` reads of the first ``position`` tokens, per head: its attention
    pattern's row; a model whose layers differ (``layer_maps``): per map on its all-heads grid, a recurrent
    layer's row as shares of its effective weights' sizes (``effective_tiles.row_shares``), NaN where a layer
    has no such map."""
    from explorer.core.analysis import effective_tiles
    from explorer.core.analysis.layer_maps import grid_columns, grid_maps, uniform
    from explorer.core.mixers.effective import effective_kind

    cfg = trace.config
    if uniform(cfg):
        attention = np.zeros((cfg.n_layers, cfg.n_heads, position), dtype=np.float32)
        for layer in range(cfg.n_layers):
            for head in range(cfg.n_heads):
                attention[layer, head] = trace.head(layer, head)[q, :position]
        return attention
    attention = np.full((cfg.n_layers, grid_columns(cfg), position), np.nan, dtype=np.float32)
    for layer in range(cfg.n_layers):
        recurrent = effective_kind(cfg, layer) is not None
        for head in range(grid_maps(cfg, layer)):
            row = effective_tiles.weights_row(trace, layer, head, q)
            attention[layer, head] = (effective_tiles.row_shares(row) if recurrent else row)[:position]
    return attention


def journey(trace: Trace, n_prompt: int, t: int, top: int = 3, vocab_size: int | None = None,
            token_id: int | None = None) -> Journey:
    """The journey of generated token t (0-based) through the model (see the module docstring).
    ``trace`` holds the token, or (``token_id`` given) ends just before it: the trace of step t itself,
    as while a generation streams in (the numbers are the same: nothing at a position sees a later one)."""
    from explorer.core.analysis.residual import boundary_labels, lens_columns

    position = n_prompt + t
    after = token_id is not None and position == trace.n_tokens  # the token follows the trace
    if not 1 <= position < trace.n_tokens + after:
        raise ValueError(f"step {t} is not in this trace ({trace.n_tokens - n_prompt} generated tokens)")
    q = position - 1
    block = lens_columns(trace, q, q + 1, top=1, vocab_size=vocab_size, next_id=token_id if after else None)
    cfg = trace.config
    attention = reads_of(trace, q, position)
    k = max(1, min(int(top), position))
    order = np.argsort(-np.nan_to_num(attention, nan=-np.inf), axis=-1, kind="stable")[..., :k]
    return Journey(step=t, position=position, token_id=int(token_id if after else trace.token_ids[position]),
                   labels=tuple(boundary_labels(cfg.n_layers)), ranks=block.target_ranks[:, 0].copy(),
                   probs=block.target_probs[:, 0].copy(), attention=attention, top_sources=order)


# --- which sampling controls changed the choice ---------------------------------------------------

@dataclass(frozen=True)
class ControlStage:
    """The chosen token after the controls up to this one (in the order they run)."""

    control: str               # "model" (no controls), "repetition penalty", "temperature", "greedy", "top-k", ...
    chosen_rank: int | None    # 0-based over the vocabulary; None: this control removed it
    chosen_prob: float
    top_id: int                # the most likely token now (ties: the lower id)
    changed: bool              # this control moved the chosen token's rank or the most likely token


def control_stages(scores) -> tuple[ControlStage, ...]:
    """How each sampling control of a recorded step (``generation.sampling.StepScores`` with its
    ``chosen_id``) moved the chosen token: the model's own distribution first, then one stage per
    control that was on, each applied on top of the ones before (their order in ``apply_controls``)."""
    params = scores.params
    if scores.chosen_id is None:
        raise ValueError("the step does not record which token was chosen")
    current = params.replace(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0)
    stages: list[tuple[str, object]] = [("model", current)]
    changes = [("repetition penalty", "repetition_penalty", params.repetition_penalty != 1.0),
               ("greedy" if params.greedy else "temperature", "temperature", params.temperature != 1.0),
               ("top-k", "top_k", params.top_k > 0), ("top-p", "top_p", params.top_p < 1.0),
               ("min-p", "min_p", params.min_p > 0.0)]
    for name, field_name, on in changes:
        if on:
            current = current.replace(**{field_name: getattr(params, field_name)})
            stages.append((name, current))
    out: list[ControlStage] = []
    for name, stage_params in stages:
        rank, prob = scores.rank_and_prob(scores.chosen_id, stage_params)
        top_id = int(np.argmax(scores.processed(stage_params)))
        changed = bool(out) and (rank != out[-1].chosen_rank or top_id != out[-1].top_id)
        out.append(ControlStage(name, rank, prob, top_id, changed))
    return tuple(out)
