"""What the QK/OV panel shows for one question, computed off the GUI thread: no widget here.

``answer(trace, question, by, copy)`` returns a ``QKAnswer`` (``qk_split``: the score's terms), an
``OVAnswer`` (``what_it_moves``: the head's output by source and its OV circuit) or, where there is no
exact answer, the one line that says why (a ``SplitError``'s, or a refusal of this module's). The rest
turns them into what the panel draws and exports: short part labels, the ranked terms, the headline,
the circuit's rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from explorer.core.analysis.ov import OVView, what_it_moves
from explorer.core.analysis.qk import QKSplit, Term, qk_split
from explorer.core.analysis.stream_parts import Part
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.errors import ExplorerError
from explorer.core.trace import Trace
from explorer.ui.panels.interventions.dla import dla_target  # the token the Logit attribution panel measures
from explorer.ui.session.background import one_line
from explorer.ui.session.question import Question

log = logging.getLogger(__name__)

TOP_TERMS = 12       # the ranked list's length
TOP_COPIED = 5       # tokens per source in the OV circuit
CIRCUIT_ROWS = 48    # sources listed in the OV circuit at most (the heaviest)
BY_HEAD_MAX = 64     # models with more heads than this split by block by default (a 144-head table is a smear)


@dataclass(frozen=True)
class QKAnswer:
    question: Question
    split: QKSplit
    by: str            # "head": each earlier head a part; "layer": each block's heads together
    weight: float      # the pattern's weight on the key (what the score became)


@dataclass(frozen=True)
class OVAnswer:
    question: Question
    view: OVView
    copy: str          # "embedding" or "value": what each row of the OV circuit copies


Answer = QKAnswer | OVAnswer | str


def default_by(trace: Trace) -> str:
    return "head" if trace.config.n_layers * trace.config.n_heads <= BY_HEAD_MAX else "layer"


def refusal(trace: Trace, question: Question) -> str | None:
    """Why ``question`` has no answer on ``trace`` before anything is computed (None: go ahead)."""
    cfg, n = trace.config, trace.n_tokens
    if not 0 <= question.layer < cfg.n_layers or not 0 <= question.head < cfg.n_heads:
        return f"this model has no head {question.layer}.{question.head}: right-click a cell in Attention again"
    for what, p in (("query", question.query), ("key", question.key)):
        if p is not None and not 0 <= p < n:
            return f"the prompt has {n} tokens now, no #{p} for the {what}: right-click a cell in Attention again"
    if not trace.has_model:
        return "this needs the model's weights: the trace was opened from a file without them"
    return None


def answer(trace: Trace, question: Question, by: str = "head", copy: str = "embedding") -> Answer:
    """The answer to ``question`` on ``trace`` (on a worker), or the one line saying why there is none."""
    refused = refusal(trace, question)
    if refused is not None:
        return refused
    try:
        if question.kind == "qk":
            split = qk_split(trace, question.layer, question.head, question.query, question.key, by=by)
            weight = float(trace.head(question.layer, question.head, "pattern")[question.query, question.key])
            return QKAnswer(question, split, by, weight)
        target = dla_target(trace, question.query)
        view = what_it_moves(trace, question.layer, question.head, question.query, target=target,
                             top=TOP_COPIED, copy=copy, limit=CIRCUIT_ROWS)
        return OVAnswer(question, view, copy)
    except ExplorerError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug: one line for the user, the traceback in the log
        log.exception("answering %s", question)
        return one_line(exc)


def memo_key(question: Question, by: str, copy: str) -> tuple:
    return ("qkov", question, by if question.kind == "qk" else "", copy if question.kind == "ov" else "")


def answer_of(trace: Trace, question: Question, by: str, copy: str) -> Answer:
    """``answer``, kept with the trace (switching between the two views of a cell computes each once)."""
    return trace.memo(memo_key(question, by, copy), lambda: answer(trace, question, by, copy))


# --- the QK view's words ---------------------------------------------------------------------------
def part_label(part: Part) -> str:
    """A part on an axis, short (the tooltips and the ranked list say it in words): "embed", "pos", "L0.H1"
    (head 0.1's output), "L0.attn" (block 0's heads together), "L0.FFN", "bias", "clamp"."""
    if part.kind == "head":
        return f"L{part.layer}.H{part.head}"
    if part.kind == "attn":
        return f"L{part.layer}.attn"
    if part.kind == "ffn":
        return f"L{part.layer}.FFN"
    return {"type": "segment", "clip": "clamp"}.get(part.kind, part.kind)


def qk_headline(a: QKAnswer, tokens: tuple[str, ...]) -> str:
    s, q = a.split, a.question
    count = s.table.size
    terms = f"{count} terms" + (f" + ALiBi {s.alibi:+.4f}" if s.alibi else "")
    capped = (f"; capped at {s.cap:g}: {s.capped:+.4f} enters the softmax" if s.capped is not None else "")
    kv = f" (key head {s.kv_head})" if s.kv_head != s.head else ""
    return (f"Why head {q.layer}.{q.head}{kv} attends from #{q.query} {quoted(tokens[q.query])} to #{q.key} "
            f"{quoted(tokens[q.key])} (weight {a.weight:.4f}): the score {s.score:+.4f} = the sum of {terms} "
            f"= {s.total:+.4f} (difference {abs(s.total - s.score):.1e}){capped}.")


def term_rows(split: QKSplit, top: int = TOP_TERMS) -> list[Term]:
    return split.terms(top)


def qk_cell_text(split: QKSplit, row: int, col: int) -> str:
    """A table cell's tooltip: the pair in words, its exact value and share, and the row's and column's totals."""
    size = float(np.abs(split.table).sum() + abs(split.alibi)) or 1.0
    value = float(split.table[row, col])
    return (f"{split.query_names[row]} against {split.key_names[col]}: {value:+.6f} ({value / size:.1%} of the "
            f"terms' sizes)\nthis query part against every key part: {split.by_part('query')[row]:+.6f}\n"
            f"every query part against this key part: {split.by_part('key')[col]:+.6f}")


# --- the OV view's words ---------------------------------------------------------------------------
def ov_headline(a: OVAnswer, tokens: tuple[str, ...], tokenizer) -> str:
    s, q = a.view.split, a.question
    text = (f"What head {q.layer}.{q.head} moves to #{q.query} {quoted(tokens[q.query])}: its output is the sum of "
            f"{len(s.sources)} sources' writes (weight × value through W_O); their shares add up to "
            f"{float(s.shares.sum()):.1%}")
    if s.dla is not None:
        text += (f"; their direct effects on the logit of {vocab_quoted(tokenizer, s.target)} add up to "
                 f"{float(s.dla.sum()):+.4f} (the head's direct logit attribution: {s.dla_total:+.4f})")
    else:
        text += f"; no direct effects: {s.dla_note}"
    if q.key is not None:
        text += f". Dashed: #{q.key}, the key of the cell asked about"
    return text + "."


def source_label(position: int, tokens: tuple[str, ...]) -> str:
    return f"#{position} {quoted(tokens[position])}"


def circuit_rows(a: OVAnswer, tokens: tuple[str, ...], tokenizer) -> list[tuple[str, str, str, str]]:
    """One row per source of the OV circuit: (source, weight, the top tokens it raises, the tooltip)."""
    c = a.view.circuit
    rows = []
    for r, j in enumerate(c.sources):
        pushed = [f"{vocab_quoted(tokenizer, int(t))} {float(v):+.2f}" for t, v in zip(c.top_ids[r], c.top_values[r])]
        exact = "\n".join(f"{vocab_quoted(tokenizer, int(t))}: {float(v):+.6f}"
                          for t, v in zip(c.top_ids[r], c.top_values[r]))
        rows.append((source_label(int(j), tokens), f"{float(c.weights[r]):.4f}", ", ".join(pushed[:3]),
                     f"copying {source_label(int(j), tokens)} (pattern weight {float(c.weights[r]):.6f}) with "
                     f"weight 1 would raise these logits most:\n{exact}"))
    return rows


def circuit_data(a: OVAnswer, tokens: tuple[str, ...], tokenizer) -> tuple[np.ndarray, list[str], list[str]]:
    """The OV circuit for an export, one row per (source, raised token): its logit."""
    c = a.view.circuit
    labels, values = [], []
    for r, j in enumerate(c.sources):
        for t, v in zip(c.top_ids[r], c.top_values[r]):
            labels.append(f"{source_label(int(j), tokens)} -> {vocab_quoted(tokenizer, int(t))}")
            values.append(float(v))
    return np.asarray(values, dtype=np.float64)[:, None], labels, ["logit added if copied with weight 1"]
