"""What a head moves: its output at one query split by source position, and its OV circuit on the prompt.

Head h's output at query i is W_O,h z_i with z_i = sum_j p_ij v_j, so it is exactly a sum over the
source positions j it sees: p_ij x W_O,h v_j (the pattern weight times the value's write). ``ov_split``
returns those writes, each one's share of the output (its projection on the output, so the shares add
up to 1) and of the head's direct effect on a target logit (direct logit attribution's convention,
explorer/core/analysis/dla.py: through the final norm with its scale frozen at i, onto W_U's row of the
target, or target minus distractor), which add up to the head's DLA term.

``ov_circuit`` asks what each source token would add to the logits if the head copied it with weight 1:
the token's embedding as it enters block L at its own position (norms frozen there, like every split
here), through the head's W_V and W_O, on to the logits at the query through every norm after it
(frozen at i) and W_U. Gemma 2's logit cap is left out (the values are before the cap); a masked-LM head
(BERT) is not linear, so there it is refused.

What the model does on the way is taken as computed, as direct logit attribution takes it (one rule, in
dla.py): the block's output norm frozen at the attention output's own scale (``dla.attention_writes``), the
layer scalars of the block and every later one (``dla.scalars_after``: Gemma 4), and Qwen3.5's sigmoid gate on
the head's output at the query (one number per dimension: it scales every source's write alike). On the value
side Gemma 4's sharing layers read an earlier layer's values (the embedding copy reads them there), its global
layers' values are their keys' projection (K = V), and each value is RMS-normed per head at its own scale.
A recurrent layer has no heads to split: refused in one line (``stream_parts.attention_layer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.dla import (
    DLAError,
    attention_writes,
    direct_logit_attribution,
    final_norm,
    final_reader,
    scalars_after,
)
from explorer.core.analysis.frozen import frozen_at, param
from explorer.core.analysis.stream_parts import SplitError, attention_layer, input_norm, read_stream, tolerance
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.model import Transformer
    from explorer.core.trace import Trace


@dataclass(frozen=True)
class OVSplit:
    layer: int
    head: int
    query: int
    sources: np.ndarray          # [m] the positions the query sees
    weights: np.ndarray          # [m] the pattern's weight on each
    writes: np.ndarray           # [m, d] p_ij x W_O,h v_j: what each source adds to the head's output
    output: np.ndarray           # [d] the head's output W_O,h z_i (before any output norm, residual scale)
    shares: np.ndarray           # [m] each write's projection on the output / |output|^2: they add up to 1
    target: int | None
    distractor: int | None
    dla: np.ndarray | None       # [m] each source's direct effect on the target's logit (minus the distractor's)
    dla_total: float | None      # the head's direct logit attribution term: dla sums to it
    dla_note: str                # why there is no DLA split ("" where there is)
    notes: tuple[str, ...] = ()  # what the split takes as computed (an output gate, an output norm, layer scalars)


@dataclass(frozen=True)
class OVCircuit:
    layer: int
    head: int
    query: int
    sources: np.ndarray          # [S] one position per distinct token the query sees (its heaviest)
    token_ids: np.ndarray        # [S]
    weights: np.ndarray          # [S] the pattern's weight on that position
    top_ids: np.ndarray          # [S, top] the tokens each source would push up most, if copied with weight 1
    top_values: np.ndarray       # [S, top] by how much (logit units, before any logit cap)
    notes: tuple[str, ...]


def _model(trace: Trace, model: Transformer | None) -> Transformer:
    model = model if model is not None else trace._model
    if model is None:
        raise SplitError("this needs the model's weights: the trace was opened without them")
    return model


def _w_o(model: Transformer, layer: int, head: int) -> np.ndarray:
    dv = model.cfg.layer(layer).d_head_v
    with weights_of(model.blocks[layer].attn.W_O) as W_O:
        return param(W_O.weight[:, head * dv:(head + 1) * dv])        # [d, dv]


def _check_head(trace: Trace, layer: int, head: int, query: int) -> tuple[np.ndarray, np.ndarray]:
    cfg, n = trace.config, trace.n_tokens
    if 0 <= layer < cfg.n_layers:
        attention_layer(cfg, layer, "heads whose output to split")
    if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.layer(layer).n_heads and -n <= query < n):
        raise SplitError(f"no head {layer}.{head} or query #{query} in this trace")
    scores = trace.head(layer, head, "scores")[query % n]
    return np.flatnonzero(np.isfinite(scores)), trace.head(layer, head, "pattern")[query % n].astype(np.float64)


def _value_head(trace: Trace, layer: int, head: int) -> int:
    """The value head query head ``head`` reads (grouped K/V heads; MLA: its own)."""
    from explorer.core.trace_keys import site_shape

    cfg = trace.config
    return head // (cfg.layer(layer).n_heads // site_shape(cfg, "attn.v", trace.n_tokens, layer)[0])


def _gate(trace: Trace, layer: int, head: int, query: int) -> np.ndarray | float:
    """Qwen3.5/Next: the sigmoid gate on head ``head``'s output at ``query`` ([dv], as computed); 1 without one."""
    if not trace.config.attn_output_gate:
        return 1.0
    return trace[f"blocks.{layer}.attn.gate"][head, query].astype(np.float64)


def _notes(cfg, norms: bool = True) -> list[str]:
    """What the split of a head's output takes as computed (its gate, the output norm, the layer scalars)."""
    out = []
    if cfg.attn_output_gate:
        out.append("The head's output is multiplied by its sigmoid gate at the query (one number per dimension, "
                   "computed from the query's own input): the gate is taken as computed, so it scales every "
                   "source's write alike.")
    if norms and cfg.norm != "none" and cfg.norm_placement in ("sandwich", "output"):
        out.append("The direct effects pass through the block's output norm, its scale frozen at the attention "
                   "output's own (as direct logit attribution does).")
    if cfg.layer_scalars:
        out.append("The direct effects count times the layer scalars of this block and every later one.")
    return out


def _circuit_notes(cfg, layer: int) -> list[str]:
    """What the embedding copy takes as computed on the values' side (Gemma 4's sharing, K = V, value norm)."""
    plan = cfg.layer(layer)
    source = cfg.layer(plan.kv_from) if plan.kv_from is not None else plan
    out = []
    if plan.kv_from is not None:
        out.append(f"Layer {layer} reuses layer {plan.kv_from}'s values (KV sharing): each embedding is read as it "
                   f"enters block {plan.kv_from}, through that layer's projection.")
    if source.k_eq_v:
        out.append("The values are the keys' projection (K = V), taken before the key norm.")
    if cfg.v_norm:
        out.append("Each value is RMS-normed per head: the norm's scale is taken as computed at each source, so "
                   "the embedding's part is rescaled as the whole value was.")
    return out


def ov_split(trace: Trace, layer: int, head: int, query: int, target: int | None = None,
             distractor: int | None = None, model: Transformer | None = None) -> OVSplit:
    """Head ``layer``.``head``'s output at ``query`` split by source position, with each source's share of the
    output and of the head's direct effect on ``target`` (default: the model's top prediction at ``query``)."""
    model = _model(trace, model)
    cfg, n = trace.config, trace.n_tokens
    sources, pattern = _check_head(trace, layer, head, query)
    query %= n
    W = _w_o(model, layer, head)
    v = trace[f"blocks.{layer}.attn.v"][_value_head(trace, layer, head)].astype(np.float64)   # [n, dv]
    writes = (pattern[sources, None] * v[sources] * _gate(trace, layer, head, query)) @ W.T    # [m, d]
    output = W @ trace[f"blocks.{layer}.attn.z"][head, query].astype(np.float64)
    if float(np.abs(writes.sum(0) - output).max()) > tolerance(trace) * max(1.0, float(np.abs(output).max())):
        raise SplitError("the sources do not add up to the head's output: this run edited the head's output")
    size = float(output @ output)
    shares = writes @ output / size if size > 0 else np.zeros(len(sources))
    if target is None:
        target = int(np.argmax(trace["logits"][query]))
    dla = dla_total = None
    note = ""
    try:
        attribution = direct_logit_attribution(trace, target, query, distractor, model)
        with weights_of(model.unembed) as unembed:
            W_U = unembed.weight
            u = cfg.logit_scale * (param(W_U[target]) - (param(W_U[distractor]) if distractor is not None else 0.0))
        r, _ = final_reader(trace, model, query, u)
        # the head's DLA term, split by source: through the output norm frozen as DLA freezes it, times the scalars
        dla = float(scalars_after(model)[layer]) * attention_writes(trace, model, layer, query).added(writes) @ r
        dla_total = float(attribution.heads[layer, head])
    except DLAError as exc:
        note = str(exc)
    return OVSplit(layer, head, query, sources, pattern[sources], writes, output, shares,
                   target, distractor, dla, dla_total, note, tuple(_notes(cfg)))


def to_logits(trace: Trace, model: Transformer, layer: int, position: int, writes: np.ndarray) -> np.ndarray:
    """Writes [S, d] of a head of block ``layer`` at ``position`` carried to the last stream before the
    un-embedding: the block's output norm frozen as direct logit attribution freezes it, the layer scalars of the
    block and every later one, and every later post-norm frozen at ``position`` (biases left out: they are no
    token's).  [S, d]"""
    cfg = model.cfg
    if model.mlm is not None:
        raise SplitError("a masked-LM head (dense, activation, norm) sits before the un-embedding: it is not "
                         "linear, so what a head adds to the logits has no exact form here")
    x = float(scalars_after(model)[layer]) * attention_writes(trace, model, layer, position).added(writes)
    for layer_ in range(layer, cfg.n_layers):                          # post-norm: every later norm rescales it
        b = model.blocks[layer_]
        if input_norm(trace, model, layer_, position) is None and b.ln1 is not None:
            x = frozen_at(trace, b.ln1, f"blocks.{layer_}.ln1", position).apply(x)
            if b.ln2 is not None:
                x = frozen_at(trace, b.ln2, f"blocks.{layer_}.ln2", position).apply(x)
    norm = final_norm(trace, model, position)
    return x if norm is None else norm.apply(x)


def embedding_value(trace: Trace, model: Transformer, layer: int, kv: int, position: int) -> np.ndarray:
    """The token embedding's part of value head ``kv`` of block ``layer`` at ``position`` (the embedding as it
    enters the block that computes the values: a KV-sharing layer's are an earlier layer's), through the input
    norm, W_V (K = V: W_K; MLA: its latent) and the per-head value norm, each norm's scale frozen at
    ``position``.  [dv]"""
    from explorer.core.analysis.frozen import freeze
    from explorer.core.analysis.stream_parts import key_layer

    cfg = model.cfg
    layer = key_layer(cfg, layer)
    plan, attn = cfg.layer(layer), model.blocks[layer].attn
    dv = plan.d_head_v
    norm = input_norm(trace, model, layer, position)
    x = trace[f"blocks.{layer}.resid_pre"][position].astype(np.float64)
    x = x if norm is None else norm.apply(x) + (norm.bias if norm.bias is not None else 0.0)
    if cfg.kv_lora_rank is not None:                                    # MLA: the value comes through the latent
        from explorer.core.analysis.qk_latent import latent_reader

        A, c, _ = latent_reader(model, layer, kv, x, "v")
    else:
        with weights_of(attn.W_V if attn.W_V is not None else attn.W_K) as proj:  # Gemma 4's K = V: W_K
            A = param(proj.weight[kv * dv:(kv + 1) * dv]).T                # [d, dv]
            c = param(proj.bias[kv * dv:(kv + 1) * dv]) if proj.bias is not None else np.zeros(dv)
    value = read_stream(trace, model, layer, position, A if norm is None else norm.pull(A), by="layer",
                        embed_only=True)[1][0]
    if attn.v_norm is not None:                                        # Gemma 4: v RMS-normed at its own scale
        whole = x @ A + c
        value = freeze(attn.v_norm, float(np.sqrt((whole ** 2).mean() + attn.v_norm.eps))).apply(value)
    return value


def ov_circuit(trace: Trace, layer: int, head: int, query: int, top: int = 5, copy: str = "embedding",
               limit: int | None = None, model: Transformer | None = None, chunk: int = 64) -> OVCircuit:
    """What each source would add to the logits at ``query`` if head ``layer``.``head`` copied it with weight 1:
    the ``top`` tokens it raises most. ``copy="embedding"``: one row per distinct token the query sees, its
    embedding -> W_V -> W_O (the OV circuit on the prompt's tokens); ``copy="value"``: one row per position,
    the value the head really reads there (the embedding and everything earlier layers added) -> W_O.
    ``limit``: only the sources the query weighs most."""
    import torch

    model = _model(trace, model)
    if copy not in ("embedding", "value"):
        raise ValueError("copy must be 'embedding' or 'value'")
    cfg, n = trace.config, trace.n_tokens
    visible, pattern = _check_head(trace, layer, head, query)
    query %= n
    ids = trace.token_ids
    kv = _value_head(trace, layer, head)
    if copy == "value":
        sources = visible[np.argsort(-pattern[visible], kind="stable")][:limit]
        values = trace[f"blocks.{layer}.attn.v"][kv, sources].astype(np.float64)
    else:
        heaviest: dict[int, int] = {}
        for j in visible:                                               # one row per token: its heaviest position
            if int(ids[j]) not in heaviest or pattern[j] > pattern[heaviest[int(ids[j])]]:
                heaviest[int(ids[j])] = int(j)
        sources = np.array(sorted(heaviest.values(), key=lambda j: -pattern[j]), dtype=np.int64)[:limit]
        values = np.asarray([embedding_value(trace, model, layer, kv, int(j)) for j in sources])
        values = values.reshape(len(sources), cfg.layer(layer).d_head_v)
    values = values * _gate(trace, layer, head, query)                 # Qwen3.5/Next: the gate at the query
    writes = values @ _w_o(model, layer, head).T                        # [S, d]
    final = to_logits(trace, model, layer, query, writes)
    top_ids, top_values = [], []
    with weights_of(model.unembed) as unembed, torch.inference_mode():
        W_U = unembed.weight
        for start in range(0, len(sources), chunk):
            x = torch.as_tensor(final[start:start + chunk], device=W_U.device)
            if model.project_out is not None:
                with weights_of(model.project_out) as proj:
                    x = x @ proj.weight.double().T
            logits = (x.to(W_U.dtype) @ W_U.T).double() * cfg.logit_scale   # [s, V]
            best = torch.topk(logits, min(top, logits.shape[-1]), dim=-1)
            top_ids.append(best.indices.cpu().numpy())
            top_values.append(best.values.cpu().numpy())
    k = min(top, cfg.vocab_size)
    notes = ["Each row copies one source token with weight 1: its embedding as it enters the block (the norm's "
             "scale frozen at its position) through the head's W_V and W_O." if copy == "embedding" else
             "Each row copies one source position's value with weight 1 (the whole value the head reads there, "
             "biases included) through the head's W_O.",
             f"On to the logits at #{query}: every norm after the head frozen at #{query} (as direct logit "
             "attribution does), then W_U; biases are left out, since they belong to no token."]
    if cfg.final_softcap is not None:
        notes.append("The values are before the model's logit cap.")
    if cfg.qkv_clip is not None and copy == "embedding":
        notes.append("OLMo's clamp of the values is left out: a clamp has no per-token form.")
    notes += _circuit_notes(cfg, layer) if copy == "embedding" else []
    notes += _notes(cfg, norms=False)
    return OVCircuit(layer, head, query, sources, ids[sources], pattern[sources],
                     np.concatenate(top_ids) if top_ids else np.zeros((0, k), np.int64),
                     np.concatenate(top_values) if top_values else np.zeros((0, k)), tuple(notes))


@dataclass(frozen=True)
class OVView:
    """What the Attention panel's "What does it move?" shows for one cell: the split of the head's output
    by source, and its OV circuit on the prompt (None where it has no exact form, ``circuit_note`` says why)."""

    split: OVSplit
    circuit: OVCircuit | None
    circuit_note: str


def what_it_moves(trace: Trace, layer: int, head: int, query: int, target: int | None = None,
                  distractor: int | None = None, top: int = 5, copy: str = "embedding", limit: int | None = None,
                  model: Transformer | None = None) -> OVView:
    """``ov_split`` and ``ov_circuit`` of one head at one query, in one call."""
    split = ov_split(trace, layer, head, query, target, distractor, model)
    try:
        return OVView(split, ov_circuit(trace, layer, head, query, top, copy, limit, model), "")
    except SplitError as exc:
        return OVView(split, None, str(exc))
