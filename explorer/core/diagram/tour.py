"""The tour "Follow this token through the model": one token of the prompt, step by step, with this
model's own numbers.

``tour_steps(trace, token, layer, head)`` returns the steps: text to ids, the embedding row, the
position, the query of one head and its scores, one score computed in full (q·k, the scale, the
bias, the cap, the mask, the softmax), the weighted sum of values, the residual add, the norm, the
FFN's strongest neurons, the logit lens and the sampling step. Each step has two or three plain
sentences, its numbers as text (``lines``) and as floats (``values``, which the tests compare with
the Trace), and the panel (and layer, head, token) it points to. Pure: the trace is only read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from explorer.core.diagram.boxes import ATTN, EMBED, EXPERTS, NEURONS, RESID, TOKENS, norm_name
from explorer.core.diagram.summaries import softmax
from explorer.core.display.tokens import quoted, vocab_quoted
from explorer.core.trace import Trace

SHOW = 6  # entries listed per step


@dataclass(frozen=True)
class TourStep:
    name: str  # tokens, embedding, position, query, score, values, residual, norm, ffn, lens, sampling
    title: str
    text: str
    lines: tuple[str, ...] = ()
    values: dict[str, float] = field(default_factory=dict)
    panel: str = RESID
    layer: int | None = None
    head: int | None = None
    token: int = 0


def _vec(a: np.ndarray, k: int = 4) -> str:
    shown = ", ".join(f"{float(x):+.3f}" for x in a[:k])
    return f"[{shown}{', …' if a.size > k else ''}]"


def _norm(a: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64)))


def _split_reason(tokenizer: Any) -> str:
    kind = (tokenizer.describe().get("type", "") if tokenizer is not None else "") or ""
    split = tokenizer.describe().get("split", "") if kind == "vocab" else ""
    if split == "words":
        return ("This model's vocabulary is a short list of whole words, so each word is one token. "
                "Real models cannot list every word; they use pieces instead.")
    if split == "chars":
        return "This model's vocabulary is single characters, so every character is its own token."
    return ("Frequent words are one token; rarer words are built from frequent fragments, found by merging "
            "the commonest pairs of bytes while the tokenizer was trained. A leading space belongs to the word "
            "after it (shown as ·).")


def tour_steps(trace: Trace, token: int, layer: int = 0, head: int = 0, tokenizer: Any = None) -> list[TourStep]:
    """The tour of ``token`` through ``trace`` (attention at ``layer``, ``head``)."""
    cfg, n = trace.config, trace.n_tokens
    t = min(max(int(token), 0), n - 1)
    L = min(max(int(layer), 0), cfg.n_layers - 1)
    h = min(max(int(head), 0), cfg.n_heads - 1)
    steps = [_tokens(trace, t, tokenizer), _embedding(trace, t), _position(trace, t, h)]
    steps += _attention(trace, t, L, h)
    steps += [_residual(trace, t, L), _norm_step(trace, t, L), _ffn(trace, t, L),
              _lens(trace, t, tokenizer), _sampling(trace, t, tokenizer)]
    return steps


def _tokens(trace: Trace, t: int, tokenizer: Any) -> TourStep:
    n = trace.n_tokens
    lo = max(0, min(t - SHOW // 2, n - SHOW))
    lines = tuple(f"#{i} {quoted(trace.tokens[i])} → id {int(trace.token_ids[i])}"
                  + ("   ◀ this token" if i == t else "")
                  for i in range(lo, min(n, lo + SHOW)))
    text = (f"The prompt is cut into {n} tokens, each replaced by its number in the vocabulary (its id): the model "
            f"never sees letters, only these ids. {_split_reason(tokenizer)}")
    return TourStep("tokens", "1. Text to ids", text, lines, {"id": float(trace.token_ids[t]), "n": float(n)},
                    TOKENS, token=t)


def _embedding(trace: Trace, t: int) -> TourStep:
    cfg, row = trace.config, trace["embed"][t]
    scale = f" The rows are multiplied by {cfg.embed_scale:.4g} on the way in." if cfg.embed_scale != 1.0 else ""
    text = (f"The id picks one row of the embedding table: {cfg.vocab_size} rows, one per vocabulary entry, each a "
            f"list of {row.size} numbers learned in training. From here on, the token is this vector.{scale}")
    lines = (f"embedding row of id {int(trace.token_ids[t])} = {_vec(row)}  ({row.size} numbers)",
             f"its length ‖row‖ = {_norm(row):.4g}")
    return TourStep("embedding", "2. The embedding row", text, lines,
                    {"norm": _norm(row), **{f"e{i}": float(row[i]) for i in range(min(4, row.size))}}, EMBED, token=t)


def _position(trace: Trace, t: int, h: int) -> TourStep:
    cfg = trace.config
    if "pos_embed" in trace:
        pos, total = trace["pos_embed"][t], trace["blocks.0.resid_pre"][t]
        text = (f"Attention alone cannot tell first from last, so a vector for position {t} is added to the "
                f"token's row. The sum is what enters block 0.")
        lines = (f"position {t} vector = {_vec(pos)}", f"‖position‖ = {_norm(pos):.4g}",
                 f"token + position = {_vec(total)}  (‖sum‖ = {_norm(total):.4g})")
        return TourStep("position", "3. The position", text, lines,
                        {"norm": _norm(pos), "sum_norm": _norm(total), "p0": float(pos[0])}, EMBED, token=t)
    if cfg.alibi:
        from explorer.core.model import alibi_slopes

        slope = float(alibi_slopes(cfg.n_heads)[h])
        text = ("Nothing is added for the position. Instead each head lowers its scores for far-away tokens: "
                f"head {h} subtracts {slope:.4g} for every step back.")
        return TourStep("position", "3. The position", text, (f"head {h}: slope m = {slope:.4g}",
                        f"a token 10 back loses {10 * slope:.4g} from its score"), {"slope": slope}, ATTN, 0, h, t)
    if cfg.positions == "rotary":
        r = cfg.rotary_dim or cfg.d_head
        slow = t * cfg.rotary_base ** (-(r - 2) / r)
        text = ("Nothing is added for the position. Inside attention, each pair of numbers in the query and key is "
                "turned by an angle that grows with the position, so q·k depends on how far apart two tokens are.")
        lines = (f"position {t}: fastest pair turned by {t} rad ({math.degrees(t) % 360:.0f}° mod 360)",
                 f"slowest pair turned by {slow:.4g} rad (base {cfg.rotary_base:g}, {r} dims turn)")
        return TourStep("position", "3. The position", text, lines, {"fast": float(t), "slow": slow}, ATTN, 0, h, t)
    text = ("This model adds no position at all. In a model that reads both directions (an encoder), the order of "
            "the words is then invisible: the same words in any order give the same vectors.")
    return TourStep("position", "3. The position", text, ("no positional vector",), {}, EMBED, token=t)


def _attention(trace: Trace, t: int, L: int, h: int) -> list[TourStep]:
    cfg, p = trace.config, f"blocks.{L}.attn."
    q, k, v = trace[p + "q"][h], trace[p + "k"], trace[p + "v"]
    g = cfg.n_heads // k.shape[0]
    scores, pattern = trace.head(L, h, "scores")[t], trace.head(L, h, "pattern")[t]
    seen = np.flatnonzero(np.isfinite(scores))
    order = seen[np.argsort(-pattern[seen], kind="stable")]
    query = TourStep(
        "query", f"4. The query of head {h} in block {L}",
        f"Head {h} turns this token's vector into a query q (what it is looking for) and every token into a key k "
        f"(what it offers). The score of a key is q·k: large when they point the same way. "
        + ("Only this token and the ones before it can be seen." if cfg.causal else "Every token can be seen."),
        (f"q = {_vec(q[t])}  (‖q‖ = {_norm(q[t]):.4g})",) + tuple(
            f"score vs #{j} {quoted(trace.tokens[j])}: {float(scores[j]):+.4f}" for j in order[:SHOW]),
        {"q_norm": _norm(q[t]), **{f"score_{int(j)}": float(scores[j]) for j in seen}}, ATTN, L, h, t)
    j = int(order[0])
    kj = k[h // g, j]
    dot = float(np.dot(q[t].astype(np.float64), kj.astype(np.float64)))
    scale = 1.0 / math.sqrt(cfg.d_head) if cfg.attn_scale is None else float(cfg.attn_scale)
    bias = 0.0
    if cfg.alibi:
        from explorer.core.model import alibi_slopes

        bias = -float(alibi_slopes(cfg.n_heads)[h]) * (t - j) * (scale if cfg.alibi_before_scale else 1.0)
    raw = dot * scale + bias
    score = cfg.attn_softcap * math.tanh(raw / cfg.attn_softcap) if cfg.attn_softcap else raw
    finite = scores[seen].astype(np.float64)
    weight = math.exp(score - finite.max()) / float(np.exp(finite - finite.max()).sum())
    lines = [f"q·k = {dot:+.5f}   (key of #{j} {quoted(trace.tokens[j])})",
             f"× scale {scale:.5g}" + (" (1/√d_head)" if cfg.attn_scale is None else "") + f" = {dot * scale:+.5f}"]
    if cfg.alibi:
        lines.append(f"+ ALiBi {bias:+.5f} = {raw:+.5f}")
    if cfg.attn_softcap:
        lines.append(f"soft cap {cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g}) = {score:+.5f}")
    masked = trace.n_tokens - seen.size
    lines += [f"mask: {masked} of {trace.n_tokens} keys hidden (−∞), #{j} is visible",
              f"score = {score:+.5f}   (the Trace: {float(scores[j]):+.5f})",
              f"softmax: exp({score:.3f} − max) / Σ exp(… − max) = {weight:.5f}"
              f"   (the Trace: {float(pattern[j]):.5f})"]
    why, why_values = _why(trace, L, h, t, j)
    lines.append(why)
    one = TourStep(
        "score", "5. One score, computed in full",
        "Here is the largest score worked out by hand: the dot product, times the scale that keeps scores from "
        "growing with the head size, then the mask. The softmax turns the visible scores into weights that are "
        "positive and add up to 1.", tuple(lines),
        {"j": float(j), "dot": dot, "scale": scale, "score": score, "weight": weight,
         "trace_score": float(scores[j]), "trace_weight": float(pattern[j]), **why_values}, ATTN, L, h, t)
    z = (pattern[seen, None].astype(np.float64) * v[h // g, seen].astype(np.float64)).sum(axis=0)
    values = TourStep(
        "values", "6. The weighted sum of values",
        "Every visible token also offers a value vector v. The head's output is the average of those values, "
        "weighted by the softmax: the tokens it attends to most contribute most. All heads' outputs are then "
        "joined and mixed by one more matrix, W_O.",
        tuple(f"{float(pattern[i]):.3f} × v of #{i} {quoted(trace.tokens[i])} (‖v‖ = {_norm(v[h // g, i]):.3g})"
              for i in order[:SHOW // 2]) + (f"sum z = {_vec(z)}  (‖z‖ = {_norm(z):.4g})",),
        {"z_norm": _norm(z), "trace_z_norm": _norm(trace[p + "z"][h, t]),
         **{f"z{i}": float(z[i]) for i in range(min(4, z.size))}}, ATTN, L, h, t)
    return [query, one, values]


def _why(trace: Trace, L: int, h: int, t: int, j: int) -> tuple[str, dict[str, float]]:
    """The score's largest term in the exact split of why the head attends (explorer/core/analysis/qk.py)."""
    from explorer.core.errors import ExplorerError

    if not trace.has_model:
        return "Why it attends here: splitting the score needs the model's weights, which this trace lacks.", {}
    from explorer.core.analysis.qk import qk_split

    try:
        split = qk_split(trace, L, h, t, j)
    except ExplorerError as exc:
        return f"Why it attends here: {exc}.", {}
    top = split.terms(1)[0]
    count = split.table.size + (1 if split.alibi else 0)
    return (f"Why it attends here: the score is {count} terms, one per part of the query's stream against one "
            f"of the key's; the largest is {top.label}, {top.value:+.4f} ({top.share:.0%} of the terms' sizes "
            "added up).",
            {"why_value": top.value, "why_share": top.share, "why_total": split.total})


def _residual(trace: Trace, t: int, L: int) -> TourStep:
    cfg, p = trace.config, f"blocks.{L}."
    before, out = trace[p + "resid_pre"][t], trace[p + "attn.out"][t]
    added = before.astype(np.float64) + out
    after = trace[p + "resid_mid"][t]
    text = ("The attention output is not a replacement: it is added to the vector that came in, the residual "
            "stream. Each block adds its findings to this running total, so early information is kept.")
    if cfg.parallel_residual:
        text += " In this model attention and the FFN read the same input and both add to it at once."
    lines = (f"stream in ‖x‖ = {_norm(before):.4g}", f"+ attention output ‖a‖ = {_norm(out):.4g}",
             f"= {_vec(added)}  (‖x + a‖ = {_norm(added):.4g})")
    return TourStep("residual", "7. The residual add", text, lines,
                    {"in_norm": _norm(before), "out_norm": _norm(out), "sum_norm": _norm(added),
                     "trace_mid_norm": _norm(after)}, RESID, L, token=t)


def _norm_step(trace: Trace, t: int, L: int) -> TourStep:
    cfg = trace.config
    site = "ln2" if f"blocks.{L}.ln2.mean" in trace or f"blocks.{L}.ln2.mean_square" in trace else "ln1"
    p = f"blocks.{L}.{site}."
    if cfg.norm == "none":
        return TourStep("norm", "8. The norm", "This model has no norms: the vectors go into each sublayer as they "
                        "are. Most models rescale them first, so that no layer sees numbers that are far too large.",
                        (), {}, RESID, L, token=t)
    source = trace[f"blocks.{L}.resid_mid" if site == "ln2" else f"blocks.{L}.resid_pre"][t].astype(np.float64)
    if cfg.norm == "layernorm":
        mean, var = float(trace[p + "mean"][t]), float(trace[p + "var"][t])
        divide = 1.0 / math.sqrt(var + cfg.norm_eps)
        text = ("Before the next sublayer the vector is rescaled: LayerNorm subtracts its mean and divides by its "
                "standard deviation, then applies learned weights. Big or small, every vector enters at a "
                "similar size.")
        lines = (f"mean = {mean:+.5f}", f"variance = {var:.5f}", f"divide by √(var + ε) = {1 / divide:.5f}")
        values = {"mean": mean, "var": var, "computed_mean": float(source.mean()), "computed_var": float(source.var())}
    else:
        ms = float(trace[p + "mean_square"][t])
        divide = 1.0 / math.sqrt(ms + cfg.norm_eps)
        text = ("Before the next sublayer the vector is rescaled. RMSNorm divides by the root of the mean square of "
                "its numbers (it does not subtract the mean, unlike LayerNorm), then applies learned weights.")
        lines = (f"mean square = {ms:.5f}", f"divide by √(ms + ε) = {1 / divide:.5f}")
        values = {"mean_square": ms, "computed_mean_square": float((source ** 2).mean())}
    if cfg.norm_placement == "post":
        text += " This model normalises after each residual add (post-norm)."
    return TourStep("norm", f"8. The norm ({norm_name(cfg)})", text, lines, values, RESID, L, token=t)


def _ffn(trace: Trace, t: int, L: int) -> TourStep:
    cfg = trace.config
    if not cfg.has_ffn:
        return TourStep("ffn", "9. The FFN", "This model has no FFN: its blocks are attention only. In most models, "
                        "each block's second half is a small network applied to every token on its own.",
                        (), {}, RESID, L, token=t)
    if cfg.layer(L).is_moe:
        return _experts(trace, t, L)
    post = trace[f"blocks.{L}.mlp.post"][t]
    top = np.argsort(-post, kind="stable")[:3]
    gate = "gate times up" if cfg.gated_ffn else "after the activation"
    text = (f"The FFN widens the vector to {cfg.d_ff} neurons, passes them through a bend (the activation), and "
            f"narrows them back. Each neuron fires for a pattern it learned; these fired the most for this token.")
    lines = tuple(f"neuron {int(i)}: {float(post[i]):+.4f} ({gate})" for i in top) + (
        f"FFN output added to the stream: ‖·‖ = {_norm(trace[f'blocks.{L}.mlp.out'][t]):.4g}",)
    return TourStep("ffn", "9. The FFN's strongest neurons", text, lines,
                    {f"neuron_{int(i)}": float(post[i]) for i in top}, NEURONS, L, token=t)


def _experts(trace: Trace, t: int, L: int) -> TourStep:
    """A mixture of experts: the router's choice for this token, each chosen expert's weighted output."""
    from explorer.core.analysis.experts import topk_margin

    cfg, key = trace.config, f"blocks.{L}.moe"
    experts, weights = trace[f"{key}.experts"][t], trace[f"{key}.weights"][t]
    outputs = trace[f"{key}.expert_out"][t]
    margin = topk_margin(trace, L)
    text = (f"Here the FFN is a mixture of {cfg.n_experts} experts. The router scored every expert for this token "
            f"and sent it to {cfg.experts_per_token} of them; each ran on the token alone, and their outputs, each "
            "times its weight, were added" + (" with the shared expert's, which every token gets." if cfg.d_shared
                                               else "."))
    lines = tuple(f"expert {int(e)}: weight {float(w):.4f}, weighted output ‖·‖ = {_norm(o):.4g}"
                  for e, w, o in zip(experts, weights, outputs))
    gap = float(margin.margin[t])
    if math.isfinite(gap):
        lines += (f"the last expert in ({int(margin.kth[t])}) beat the best left out ({int(margin.next[t])}) "
                  f"by {gap:.3g} in the router's scores",)
    if cfg.d_shared:
        lines += (f"shared expert's output: ‖·‖ = {_norm(trace[f'{key}.shared_out'][t]):.4g}",)
    values = {f"expert_{int(e)}": float(w) for e, w in zip(experts, weights)}
    return TourStep("ffn", "9. The experts this token went to", text, lines, values, EXPERTS, L, token=t)


def _lens(trace: Trace, t: int, tokenizer: Any) -> TourStep:
    from explorer.core.analysis.residual import lens_columns

    logits = trace["logits"][t]
    probs = softmax(logits)
    best = int(np.argmax(probs))
    lines: list[str] = []
    if trace.has_model:
        block = lens_columns(trace, t, t + 1, top=1)
        labels = [f"after block {i - 1}" if i else "embedding" for i in range(block.ids.shape[0] - 1)] + ["output"]
        lines = [f"{labels[b]}: {vocab_quoted(tokenizer, int(block.ids[b, 0, 0]), 12)} "
                 f"{float(block.probs[b, 0, 0]):.1%}"
                 for b in range(block.ids.shape[0])]
    text = ("At the end the vector is normalised once more and compared with every vocabulary row: one score "
            "(a logit) per possible next token. Doing the same to the stream after each block, the logit lens, shows "
            "when the model settled on its guess.")
    return TourStep("lens", "10. The logit lens", text, tuple(lines[-SHOW:]),
                    {"top_id": float(best), "top_prob": float(probs[best])}, RESID, token=t)


def _sampling(trace: Trace, t: int, tokenizer: Any) -> TourStep:
    logits = trace["logits"][t].astype(np.float64)
    cold = softmax(logits / 0.7)
    probs = softmax(logits)
    top = np.argsort(-probs, kind="stable")[:3]
    text = ("Softmax turns the logits into probabilities: greedy decoding takes the most likely token, sampling draws "
            "one at random by these odds. A temperature below 1 sharpens the odds towards the favourite, above 1 "
            "flattens them.")
    if not trace.config.causal:
        text += " (This model is an encoder: it fills in masked words rather than continuing the text.)"
    lines = tuple(f"{vocab_quoted(tokenizer, int(i), 12)}: p = {probs[i]:.4f} at temperature 1, {cold[i]:.4f} at 0.7"
                  for i in top)
    return TourStep("sampling", "11. Choosing the next token", text, lines,
                    {"greedy_id": float(top[0]), "p_top": float(probs[top[0]]), "p_top_cold": float(cold[top[0]])},
                    "GenerationPane", token=t)
