"""The residual stream at one position as a sum of named parts, read through a linear reader.

Entering block L at position x, the stream is what was added to it: the token embedding (times the
model's embedding scale), the position vector where positions are added, BERT's segment vector, every
earlier head's output (W_O's slice for that head times its z), every earlier FFN's output, and constants
(W_O's bias, the biases of norms on the way). With every norm's scale frozen at its value on this prompt
(explorer/core/analysis/frozen.py), each norm on the way is a linear map, so the parts still add up exactly:

* pre-norm blocks: the stream is the plain sum of the parts;
* norms on each sublayer's output (Gemma 2/3's sandwich, OLMo 2): each head's output goes through the
  output norm (frozen at x) before it is added, and the norm's bias is a constant;
* post-norm blocks (BERT, OPT-350m): every later norm centres and rescales all the parts written before it;
* a norm over the embeddings (BERT, BLOOM): the embedding parts go through it.

``read_stream(trace, model, layer, position, reader)`` returns every part times a reader A [d, k] (the
parts' contributions to whatever is read linearly off the stream: a head's query, a logit direction),
pulling A back through the frozen norms instead of pushing each part forward. Each block's heads and the
attention bias are checked against the attention output the model recorded (a run whose attention output
was edited as a whole is refused: its heads no longer add up to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.frozen import FrozenNorm, frozen_at, param
from explorer.core.errors import ExplorerError
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.model import Transformer
    from explorer.core.trace import Trace


class SplitError(ExplorerError):
    """A score or an output cannot be split into parts here (one line saying why)."""


@dataclass(frozen=True)
class Part:
    """One part of the residual stream at a position. ``kind``: embed, pos, type, head, attn (a block's heads
    together), ffn, bias (every constant on the way: W_O's and the norms' biases, the projection's own bias),
    clip (OLMo's q/k clamp: what the clamp changed), sink (none yet: a documented case)."""

    kind: str
    layer: int | None = None
    head: int | None = None

    @property
    def key(self) -> str:
        if self.kind == "head":
            return f"L{self.layer}.H{self.head}"
        if self.kind in ("attn", "ffn"):
            return f"L{self.layer}.{self.kind}"
        return self.kind

    def name(self, token: str = "", position: int | None = None) -> str:
        """The part in words: "head 0.1's output", "the embedding of '·Mary'"."""
        if self.kind == "head":
            return f"head {self.layer}.{self.head}'s output"
        if self.kind == "attn":
            return f"block {self.layer}'s attention output"
        if self.kind == "ffn":
            return f"block {self.layer}'s FFN output"
        return {"embed": f"embedding of {token}" if token else "token embedding",
                "pos": f"position {position}" if position is not None else "position vector",
                "type": "segment embedding", "bias": "biases", "clip": "clamp"}.get(self.kind, self.kind)


def attention_layer(cfg, layer: int) -> None:
    """Refuse (one line) a block whose token mixer is not attention: it has no query, key or pattern."""
    plan = cfg.layer(layer)
    if not plan.is_attention:
        from explorer.core.plan import MIXER_NAMES

        raise SplitError(f"block {layer} is a {MIXER_NAMES.get(plan.mixer, plan.mixer)} layer, not attention: no "
                         "query meets a key there, so it has no score to split and no pattern to move values by")


def _pre_norm(model: Transformer, layer: int) -> bool:
    blk = model.blocks[layer]
    return model.cfg.norm_placement in ("pre", "sandwich") and blk.ln1 is not None


def input_norm(trace: Trace, model: Transformer, layer: int, position: int) -> FrozenNorm | None:
    """The norm attention reads block ``layer``'s input through (pre-norm, sandwich), frozen at ``position``;
    None where attention reads the stream itself (post-norm blocks, OLMo 2's output norms, no norms)."""
    if not _pre_norm(model, layer):
        return None
    return frozen_at(trace, model.blocks[layer].ln1, f"blocks.{layer}.ln1", position)


def _check(ours: np.ndarray, recorded: np.ndarray, what: str, tol: float) -> None:
    scale = max(1.0, float(np.abs(recorded).max()))
    if float(np.abs(ours - recorded).max()) > tol * scale:
        raise SplitError(f"the parts do not add up to {what}: this run's sublayer outputs are not the sum of "
                         "its heads (an edit of a whole sublayer or of the stream?), so no exact split exists")


def tolerance(trace: Trace) -> float:
    """How far a sum of parts may stray from what the model recorded before a split is refused: float32
    rounding, wider for half-precision runs and half-precision storage."""
    half = trace.meta.dtype in ("float16", "bfloat16") or any(
        trace.stored_dtype(k) == "float16" for k in trace.stored_keys())
    return 3e-2 if half else 2e-3


def head_writes(model: Transformer, z: np.ndarray, layer: int) -> np.ndarray:
    """What each head of ``layer`` writes at one position before any output norm: W_O[:, h] @ z[h].  [H, d]"""
    from explorer.core.analysis.dla import _head_outputs

    with weights_of(model.blocks[layer].attn.W_O) as W_O:
        return _head_outputs(W_O.weight, z)


def _attn_bias(model: Transformer, layer: int) -> np.ndarray:
    with weights_of(model.blocks[layer].attn.W_O) as W_O:
        return param(W_O.bias) if W_O.bias is not None else np.zeros(model.cfg.d_model)


def read_stream(trace: Trace, model: Transformer, layer: int, position: int, reader: np.ndarray,
                by: str = "head", embed_only: bool = False) -> tuple[list[Part], np.ndarray]:
    """The parts of the stream entering block ``layer`` at ``position``, each read through ``reader`` [d, k].

    Returns (parts, values [P, k]) in the order embedding, position, segment, then block by block its heads
    (``by="layer"``: a block's heads as one part) and its FFN, and last the constants (``bias``). The values add
    up to ``resid_pre[position] @ reader`` (the stream itself where every block is pre-norm; its reading
    through the frozen norms otherwise). ``embed_only``: only the embedding parts' values are computed
    (the reader is still carried back through every norm).
    """
    cfg = model.cfg
    if by not in ("head", "layer"):
        raise ValueError("by must be 'head' or 'layer'")
    tol = tolerance(trace)
    A = np.asarray(reader, dtype=np.float64)
    k = A.shape[1]
    bias = np.zeros(k)
    blocks: list[tuple[list[Part], list[np.ndarray]]] = []
    rs = float(cfg.residual_scale)
    for layer_ in reversed(range(layer)):
        blk = model.blocks[layer_]
        plan = cfg.layer(layer_)
        if plan.mixer not in ("attention", "none"):  # a recurrent mixer's writes: not split into parts yet
            from explorer.core.plan import MIXER_NAMES

            raise SplitError(f"block {layer_} is a {MIXER_NAMES.get(plan.mixer, plan.mixer)} layer: what it writes "
                             "to the stream is not split into parts yet, so nothing read after it has an exact split")
        post = not _pre_norm(model, layer_) and blk.ln1 is not None
        if post and cfg.parallel_residual:
            raise SplitError("a parallel block with post-norms: no model here has one, so its split is not written")
        parts: list[Part] = []
        values: list[np.ndarray] = []
        if cfg.layer(layer_).has_ffn:  # a dense FFN or a mixture of experts: its mlp.out is what it added
            if post and blk.ln2 is not None:
                n2 = frozen_at(trace, blk.ln2, f"blocks.{layer_}.ln2", position)
                bias = bias + n2.bias_read(A)
                A = n2.pull(A)
            parts.append(Part("ffn", layer_))
            values.append(np.zeros(k) if embed_only else trace[f"blocks.{layer_}.mlp.out"][position] @ A)
        if post:
            n1 = frozen_at(trace, blk.ln1, f"blocks.{layer_}.ln1", position)
            bias = bias + n1.bias_read(A)
            A = n1.pull(A)
        if plan.is_attention:  # (a block without a token mixer writes only its FFN's output)
            Aw = A * rs                                     # attention output = rs * out_norm(W_O z + b_O)
            out_norm = None
            if blk.ln1_out is not None:
                out_norm = frozen_at(trace, blk.ln1_out, f"blocks.{layer_}.ln1_out", position)
                bias = bias + out_norm.bias_read(Aw)
                Aw = out_norm.pull(Aw)
            b_O = _attn_bias(model, layer_)
            bias = bias + b_O @ Aw
            if embed_only:
                head_parts = ([Part("attn", layer_)] if by == "layer"
                              else [Part("head", layer_, h) for h in range(cfg.n_heads)])
                parts[:0], values[:0] = head_parts, [np.zeros(k)] * len(head_parts)
            else:
                writes = head_writes(model, trace[f"blocks.{layer_}.attn.z"][:, position], layer_)  # [H, d]
                total = writes.sum(0) + b_O
                added = rs * (total if out_norm is None else out_norm.apply(total) + (
                    out_norm.bias if out_norm.bias is not None else 0.0))
                _check(added, trace[f"blocks.{layer_}.attn.out"][position], f"block {layer_}'s attention output", tol)
                read = writes @ Aw                           # [H, k]
                if by == "layer":
                    parts[:0], values[:0] = [Part("attn", layer_)], [read.sum(0)]
                else:
                    parts[:0], values[:0] = [Part("head", layer_, h) for h in range(cfg.n_heads)], list(read)
        blocks.append((parts, values))
    first_parts: list[Part] = []
    first_values: list[np.ndarray] = []
    if model.ln_embed is not None:
        ne = frozen_at(trace, model.ln_embed, "ln_embed", position)
        bias = bias + ne.bias_read(A)
        A = ne.pull(A)
    embed = trace["embed"][position].astype(np.float64) * float(cfg.embed_scale)
    first_parts.append(Part("embed"))
    first_values.append(embed @ A)
    for kind, key in (("pos", "pos_embed"), ("type", "type_embed")):
        if key in trace:
            first_parts.append(Part(kind))
            first_values.append(trace[key][position].astype(np.float64) @ A)
    parts = first_parts + [p for block_parts, _ in reversed(blocks) for p in block_parts] + [Part("bias")]
    values = first_values + [v for _, block_values in reversed(blocks) for v in block_values] + [bias]
    return parts, np.stack(values)
