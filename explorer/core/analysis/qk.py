"""Why a head attends: one attention score split into (query part) x (key part) terms that add up exactly.

The score of head h from query i to key j is q_i . k_j x scale (+ ALiBi's bias). The query is a linear
read of the stream at i once the norm's scale is frozen (explorer/core/analysis/frozen.py), and so is the
key at j; the stream at each is a sum of parts (explorer/core/analysis/stream_parts.py). So

    score = sum over query parts a, key parts b of  scale x Q_a . K_b   (+ ALiBi)

where Q_a is part a's share of q_i after everything the model does to the query: the norm before
attention, W_Q's rows of the head, OLMo's clamp (what it changed is a part of its own), the q/k norm
(its scale frozen as computed), rotary (a rotation by i's angle: linear). DeepSeek's latent attention
(MLA) reads q and k through its compressed projections, each latent norm's scale frozen as computed, the
rotary slice turned on its own (``qk_latent.py``). Per-layer shapes come from the layer's plan (Gemma 4's
wider global heads); a KV-sharing layer's key is split where it was computed (``key_layer``); Llama 4's
temperature multiplies the query's parts. The terms add up to the score the model recorded before any soft
cap; ``qk_split`` checks it and refuses rather than show terms that do not add up. A layer without attention
(a recurrent mixer, an FFN-only block) has no score: refused in one line naming its kind.

``qk_split(trace, layer, head, query, key)`` -> ``QKSplit``: the table (query parts x key parts), the ALiBi
term, the recorded score (and the capped value where the model caps), plain notes, and ``terms()``: the
ranked list with shares and labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.frozen import frozen_at, param
from explorer.core.analysis.stream_parts import (
    Part,
    SplitError,
    attention_layer,
    input_norm,
    key_layer,
    read_stream,
    stream_notes,
    tolerance,
)
from explorer.core.display.tokens import quoted
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.model import Transformer
    from explorer.core.trace import Trace


@dataclass(frozen=True)
class Term:
    """One cell of the table (or ALiBi's bias, with no parts): its value, its share and the words for it."""

    query_part: Part | None
    key_part: Part | None
    value: float
    share: float   # value / the sum of every term's size: between -1 and 1, the sizes add up to 1
    label: str

    @property
    def sentence(self) -> str:
        return f"{self.label}: {self.share:.0%}"


@dataclass(frozen=True)
class QKSplit:
    layer: int
    head: int
    kv_head: int                     # the key head this query head reads (grouped K/V heads)
    query: int
    key: int
    query_parts: tuple[Part, ...]
    key_parts: tuple[Part, ...]
    query_names: tuple[str, ...]     # "the query's embedding of '·Mary'", "head 0.1's output at the key"
    key_names: tuple[str, ...]
    table: np.ndarray                # [Pq, Pk]: scale x Q_a . K_b
    alibi: float                     # ALiBi's -m (i - j) (scaled where the model scales it); 0 without
    score: float                     # the score the model computed, before any soft cap
    capped: float | None             # after the cap: what entered the softmax (Gemma 2); None uncapped
    cap: float | None
    notes: tuple[str, ...]

    @property
    def total(self) -> float:
        """The sum of the terms: equals ``score`` up to float rounding."""
        return float(self.table.sum() + self.alibi)

    def terms(self, top: int | None = None) -> list[Term]:
        """Every term, largest first (``top``: the first ``top``)."""
        size = float(np.abs(self.table).sum() + abs(self.alibi)) or 1.0
        flat = np.argsort(-np.abs(self.table), axis=None, kind="stable")
        cells = [(int(c) // self.table.shape[1], int(c) % self.table.shape[1]) for c in flat[: top or None]]
        out = [Term(self.query_parts[a], self.key_parts[b], float(self.table[a, b]),
                    float(self.table[a, b]) / size, f"{self.query_names[a]} against {self.key_names[b]}")
               for a, b in cells]
        if self.alibi:
            out.append(Term(None, None, self.alibi, self.alibi / size,
                            f"ALiBi's distance penalty ({self.query - self.key} steps back)"))
            out.sort(key=lambda t: -abs(t.value))
        return out[: top or None]

    def by_part(self, side: str) -> np.ndarray:
        """Each query part's (``side="query"``) or key part's total over the other side."""
        return self.table.sum(1) if side == "query" else self.table.sum(0)


def _name(part: Part, side: str, token: str, position: int) -> str:
    if part.kind in ("head", "attn", "ffn", "mixer", "ple"):
        return f"{part.name()} at the {side}"
    if part.kind == "embed":
        return f"the {side}'s embedding of {quoted(token)}"
    if part.kind == "pos":
        return f"the {side}'s position ({position})"
    if part.kind == "bias":
        return f"the biases at the {side}"
    if part.kind == "clip":
        return f"the clamp at the {side}"
    return f"the {side}'s {part.name()}"


def side_parts(trace: Trace, model: Transformer, layer: int, head: int, position: int, which: str,
               by: str = "head") -> tuple[list[Part], np.ndarray]:
    """Each part's share of head ``head``'s query (``which="q"``; a key head's key: ``"k"``) at ``position``,
    as the model computes it up to the dot product: [P, d_head]; they add up to the recorded q (k). A key of a
    KV-sharing layer is split where it was computed: in the layer it shares with (``key_layer``)."""
    import torch

    from explorer.core.model import apply_rotary, apply_rotary_interleaved, query_temperature

    cfg = model.cfg
    layer = key_layer(cfg, layer) if which == "k" else layer
    plan, blk = cfg.layer(layer), model.blocks[layer]
    dh, full = plan.d_head, plan.qk_norm == "full"
    norm = input_norm(trace, model, layer, position)
    turned = 0                                           # the leading columns rotary leaves alone (MLA's no-rope part)
    if cfg.kv_lora_rank is not None:                     # DeepSeek's latent attention: through its latents
        from explorer.core.analysis.qk_latent import latent_reader

        x = trace[f"blocks.{layer}.resid_pre"][position].astype(np.float64)
        if norm is not None:
            x = norm.apply(x) + (norm.bias if norm.bias is not None else 0.0)
        A, const, turned = latent_reader(model, layer, head, x, which)
    else:
        with weights_of(blk.attn.W_Q if which == "q" else blk.attn.W_K) as proj:
            rows = slice(None) if full else slice(head * dh, (head + 1) * dh)
            A = param(proj.weight[rows]).T               # [d, k]: the head's rows (every head's: a full q/k norm)
            const = param(proj.bias[rows]) if proj.bias is not None else np.zeros(A.shape[1])
    if norm is not None:
        const = const + norm.bias_read(A)
        A = norm.pull(A)
    parts, values = read_stream(trace, model, layer, position, A, by)
    values[-1] += const                                                 # the bias part comes last
    if cfg.qkv_clip is not None:                                        # OLMo: clamp(q) = q + (what it changed)
        total = values.sum(0)
        changed = np.clip(total, -cfg.qkv_clip, cfg.qkv_clip) - total
        if np.any(changed):
            parts, values = parts + [Part("clip")], np.vstack([values, changed])
    qk_norm = blk.attn.q_norm if which == "q" else blk.attn.k_norm
    if qk_norm is not None:
        frozen = frozen_at(trace, qk_norm, f"blocks.{layer}.attn.{which}_norm", position, None if full else head)
        values = frozen.apply(values)
        if frozen.bias is not None:
            values[parts.index(Part("bias"))] += frozen.bias
        if full:
            values = values[:, head * dh:(head + 1) * dh]
    rotary = model.rotary_for(trace.n_tokens, "cpu", layer)
    if rotary is not None:
        turn = apply_rotary_interleaved if cfg.rotary_interleaved else apply_rotary
        cos, sin = (t[position:position + 1].cpu() for t in rotary)
        values[:, turned:] = turn(torch.from_numpy(values[:, turned:].copy())[:, None], cos, sin)[:, 0].numpy()
    if which == "q" and plan.temperature:                               # Llama 4's NoPE layers: q times a number
        values = values * float(query_temperature(torch.tensor([position]), cfg.attn_temperature,
                                                  cfg.attn_temperature_floor)[0])
    bias = parts.index(Part("bias"))
    if not np.any(values[bias]):                                        # a model without biases: no such part
        parts, values = parts[:bias] + parts[bias + 1:], np.delete(values, bias, axis=0)
    recorded = trace[f"blocks.{layer}.attn.{which}"][head, position].astype(np.float64)
    scale = max(1.0, float(np.abs(recorded).max()))
    if float(np.abs(values.sum(0) - recorded).max()) > tolerance(trace) * scale:
        what = "query" if which == "q" else "key"
        raise SplitError(f"the parts of the {what} do not add up to the {what} the model computed at #{position} "
                         "(the run was edited, or this model's attention is not linear in its input here)")
    return parts, values


def _index(value: int, size: int, what: str) -> int:
    value = int(value)
    if not -size <= value < size:
        raise SplitError(f"{what} {value} is out of range (0..{size - 1})")
    return value % size


def qk_split(trace: Trace, layer: int, head: int, query: int, key: int, by: str = "head",
             model: Transformer | None = None) -> QKSplit:
    """Split the score of ``head`` in block ``layer`` from position ``query`` to ``key`` into query part x key
    part terms (``by="layer"``: each block's heads together, for models with many heads)."""
    from explorer.core.model import score_bias

    model = model if model is not None else trace._model
    if model is None:
        raise SplitError("splitting a score needs the model's weights: this trace was opened without them")
    cfg, n = trace.config, trace.n_tokens
    layer = _index(layer, cfg.n_layers, "layer")
    attention_layer(cfg, layer, "attention scores to split")
    plan = cfg.layer(layer)
    head = _index(head, plan.n_heads, "head")
    query, key = _index(query, n, "query position"), _index(key, n, "key position")
    recorded = float(trace.head(layer, head, "scores")[query, key])
    if not math.isfinite(recorded):
        raise SplitError(f"key #{key} is hidden from query #{query} in block {layer} (the mask): it has no score")
    kv = head // (plan.n_heads // plan.n_kv_heads)
    q_parts, Q = side_parts(trace, model, layer, head, query, "q", by)
    k_parts, K = side_parts(trace, model, layer, kv, key, "k", by)
    scale = 1.0 / math.sqrt(Q.shape[1]) if cfg.attn_scale is None else float(cfg.attn_scale)  # as attention_scores
    table = scale * (Q @ K.T)
    bias = score_bias(cfg, n, n, "cpu", slice(head, head + 1))
    alibi = float(bias[0, query, key]) if bias is not None else 0.0
    cap = cfg.attn_softcap
    score = float(trace[f"blocks.{layer}.attn.scores_precap"][head, query, key]) if cap else recorded
    total = float(table.sum() + alibi)
    if abs(total - score) > tolerance(trace) * max(1.0, abs(score)):
        raise SplitError(f"the terms add up to {total:.6g}, not to the score {score:.6g} the model computed")
    tok = trace.tokens
    return QKSplit(layer, head, kv, query, key, tuple(q_parts), tuple(k_parts),
                   tuple(_name(p, "query", tok[query], query) for p in q_parts),
                   tuple(_name(p, "key", tok[key], key) for p in k_parts),
                   table, alibi, score, recorded if cap else None, cap,
                   notes(cfg, model, layer, head, kv, score, recorded if cap else None, alibi, q_parts + k_parts)
                   + _rounding(trace, total, score))


def _rounding(trace: Trace, total: float, score: float) -> tuple[str, ...]:
    if trace.meta.dtype not in ("float16", "bfloat16"):
        return ()
    return (f"This model runs in {trace.meta.dtype}: the terms, computed in float64 from its rounded activations, "
            f"add up to the score within its rounding (here {abs(total - score):.2g}).",)


def notes(cfg, model: Transformer, layer: int, head: int, kv: int, score: float, capped: float | None,
          alibi: float, parts: list[Part]) -> tuple[str, ...]:
    """What the split assumes and where it stops, in plain sentences."""
    out = []
    if cfg.norm != "none":
        out.append("Each norm's scale is taken as the model computed it on this prompt (LayerNorm: the standard "
                   "deviation; RMSNorm: the root mean square), so each norm is a fixed linear map here and the "
                   "parts add up exactly.")
    if cfg.norm_placement == "post":
        out.append("This model normalises after each residual add (post-norm): every part written before a norm "
                   "was centred and rescaled by it, with that norm's scale on this prompt.")
    if cfg.norm_placement in ("sandwich", "output"):
        out.append("Each head's and FFN's output passes through its block's output norm (scale frozen) before "
                   "it is added to the stream.")
    if cfg.parallel_residual:
        out.append("Attention and the FFN of a block read the same input, so block "
                   f"{layer}'s own FFN is not among the parts.")
    if cfg.layer(layer).qk_norm != "none":
        out.append("The q/k norm is frozen too: its scale depends on the whole query (key), so each part is "
                   "measured at the scale the full query (key) had.")
    if cfg.kv_lora_rank is not None:
        what = "the query and the key come" if cfg.q_lora_rank is not None else "the key comes"
        out.append(f"Latent attention (MLA): {what} through small latents, each RMS-normed with its scale taken as "
                   "computed at that position; the key's rotary slice is read straight from the stream, shared by "
                   "every head, and only the rotary slices of the query and the key turn.")
    if any(p.kind == "clip" for p in parts):
        out.append(f"The model clamps q and k to ±{cfg.qkv_clip:g}; what the clamp changed is its own part.")
    plan = cfg.layer(layer)
    if plan.rotary:
        out.append("Rotary positions turn each part of the query by the query's angle and each part of the key "
                   "by the key's: a rotation is linear, so the parts still add up.")
    if plan.temperature:
        out.append("This layer has no rotary positions; its query is multiplied by a number that grows with the "
                   "query's position (Llama 4's temperature), and so is each part of it.")
    if plan.n_kv_heads != plan.n_heads:
        out.append(f"Key and value heads are shared: query head {head} reads key head {kv} "
                   f"(of {plan.n_kv_heads}).")
    if plan.kv_from is not None:
        out.append(f"Layer {layer} computes no keys of its own: it reuses layer {plan.kv_from}'s (KV sharing), so "
                   f"the key is split where it was computed, in the stream entering block {plan.kv_from}.")
    out += stream_notes(cfg, parts)
    if alibi:
        out.append(f"ALiBi adds {alibi:+.4g} to the score for the distance: its own term, not part of the stream.")
    if capped is not None:
        out.append(f"The model soft-caps scores: the terms split the score before the cap, {score:+.4f}; "
                   f"{cfg.attn_softcap:g}·tanh(s/{cfg.attn_softcap:g}) = {capped:+.4f} is what enters the softmax "
                   "(a tanh is not a sum, so the capped value has no exact split).")
    return tuple(out)
