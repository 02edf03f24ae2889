"""A generation as a JSON-able transcript: what was chosen at each step, and from what (no Qt).

:func:`transcript_dict` reads the :class:`~explorer.core.generation.generate.Step` objects of a generation
(only ``index``, ``token_id``, ``text`` and ``scores``, a
:class:`~explorer.core.generation.sampling.StepScores` re-scored with ``rescore``) and returns plain
dicts, lists, strings, numbers and None, so that ``json.dumps`` writes it as it is. Layout::

    {"format": "transformer-explorer.transcript", "version": 1,
     "model": ..., "prompt": "...", "text": "...", "stop_reason": ..., "n_steps": N,
     "controls": {temperature, top_k, top_p, min_p, repetition_penalty, seed, max_new_tokens,
                  stop_at_eos, stop_strings, stop_token_ids},
     "steps": [{"index", "token_id", "text",
                "prob", "rank",                     # of the chosen token under the controls
                "raw_prob", "raw_rank",             # of the chosen token with no controls
                "entropy_before", "entropy_after",  # nats
                "num_possible",                     # tokens the controls left possible
                "before": [{"id", "text", "prob", "logit"}, ...],   # top 10, no controls
                "after":  [{"id", "text", "prob", "logit"}, ...]}]} # top 10 under the controls

Ranks are 0-based over the whole vocabulary (ties: lower id first); a rank is null when the
controls removed the token. ``after`` logits are the processed ones (penalised, divided by the
temperature). Non-finite numbers never appear (they would not be valid JSON).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.core.generation.generate import Step
    from explorer.core.generation.sampling import Distribution, SamplingParams

FORMAT = "transformer-explorer.transcript"
VERSION = 1
TOP_CANDIDATES = 10


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _candidates(dist: Distribution, display: Callable[[int], str] | None, known: dict[int, str]) -> list[dict]:
    out = []
    for token_id, prob, logit in zip(dist.ids.tolist(), dist.probs.tolist(), dist.logits.tolist()):
        text = display(int(token_id)) if display is not None else known.get(int(token_id))
        out.append({"id": int(token_id), "text": text, "prob": _number(prob), "logit": _number(logit)})
    return out


def _controls(params: SamplingParams | None) -> dict[str, Any] | None:
    if params is None:
        return None
    data = dataclasses.asdict(params)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()}


def transcript_dict(prompt: str, steps: Sequence[Step], params: SamplingParams | None = None, *,
                    text: str | None = None, display: Callable[[int], str] | None = None,
                    stop_reason: str | None = None, model: str | None = None,
                    top: int = TOP_CANDIDATES, interventions: Sequence[dict] = ()) -> dict[str, Any]:
    """A generation as a JSON-able dict (layout in the module docstring).

    ``params``: the controls the steps were generated with (default: those recorded in the first
    step); the "after" distributions, probabilities and ranks are computed under them.
    ``text``: the continuation's text (pass ``GenerationResult.text``, decoded properly); by
    default the steps' display strings joined. ``display``: token id -> display string (e.g.
    ``tokenizer.display``) for the candidates' texts; without it a candidate's text is known only
    when it is one of the chosen tokens, and is null otherwise. ``top``: candidates per list.
    ``interventions``: descriptions (``Intervention.describe()``) of those active while generating.
    """
    steps = list(steps)
    if params is None and steps:
        params = steps[0].scores.params
    known = {int(s.token_id): s.text for s in steps}
    records = []
    for step in steps:
        before, after = step.scores.rescore(params, int(top))
        token_id = int(step.token_id)
        prob, rank = after.chosen_prob, after.chosen_rank
        raw_prob, raw_rank = before.chosen_prob, before.chosen_rank
        if after.chosen_id is None or after.chosen_id != token_id:  # scores without (this) chosen id
            rank, prob = step.scores.rank_and_prob(token_id, params)
            raw_rank, raw_prob = step.scores.rank_and_prob(token_id, _no_controls(params))
        records.append({
            "index": int(step.index),
            "token_id": token_id,
            "text": step.text,
            "prob": _number(prob),
            "rank": None if rank is None else int(rank),
            "raw_prob": _number(raw_prob),
            "raw_rank": None if raw_rank is None else int(raw_rank),
            "entropy_before": _number(before.entropy),
            "entropy_after": _number(after.entropy),
            "num_possible": int(after.num_possible),
            "before": _candidates(before, display, known),
            "after": _candidates(after, display, known),
        })
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": model,
        "prompt": prompt,
        "text": "".join(s.text for s in steps) if text is None else text,
        "stop_reason": stop_reason,
        "n_steps": len(records),
        "controls": _controls(params),
        **({"interventions": list(interventions)} if interventions else {}),
        "steps": records,
    }


def _no_controls(params: SamplingParams | None) -> SamplingParams:
    from explorer.core.generation.sampling import SamplingParams

    base = params if params is not None else SamplingParams()
    return base.replace(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0)


def transcript_json(data: dict[str, Any]) -> str:
    """The transcript as JSON text (UTF-8 characters kept, two-space indents, final newline)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_transcript_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write a transcript atomically (``explorer.core.export.write_text``)."""
    from explorer.core.export import write_text

    write_text(path, transcript_json(data))
