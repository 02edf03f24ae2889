"""The residual stream at one position as a sum of named parts, read through a linear reader.

Entering block L at position x, the stream is what was added to it: the token embedding (times the
model's embedding scale), the position vector where positions are added, BERT's segment vector, every
earlier head's output (W_O's slice for that head times its z, z after any output gate), every earlier
recurrent layer's whole output (a Gated DeltaNet, Mamba-2 or convolution layer is one part: it is not linear
in its input; Falcon-H1's Mamba-2 scan beside its attention too), every earlier FFN's output, Gemma 4's
per-layer-input sublayers, and constants (W_O's bias, the biases of norms on the way). With every norm's scale
frozen at its value on this prompt (explorer/core/analysis/frozen.py), each norm on the way is a linear map,
so the parts still add up exactly:

* pre-norm blocks: the stream is the plain sum of the parts;
* norms on each sublayer's output (Gemma 2-4's sandwich, OLMo 2): each head's output goes through the
  output norm, frozen at the scale of the sublayer's whole output, before it is added, and the norm's bias
  is a constant (the rule direct logit attribution follows: ``dla.attention_writes``);
* Gemma 4's layer scalars: the stream leaving a block is multiplied by its scalar, so each part arrives times
  the scalars of its block and every later block before L (``dla.scalars_after``);
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

from explorer.core.analysis.frozen import FrozenNorm, frozen_at
from explorer.core.errors import ExplorerError

if TYPE_CHECKING:
    from explorer.core.model import Transformer
    from explorer.core.trace import Trace


class SplitError(ExplorerError):
    """A score or an output cannot be split into parts here (one line saying why)."""


@dataclass(frozen=True)
class Part:
    """One part of the residual stream at a position. ``kind``: embed, pos, type, head, attn (a block's heads
    together), mixer (a recurrent layer's whole output, or Falcon-H1's Mamba-2 scan beside its attention; ``what``
    names the mixer), ffn, ple (Gemma 4's per-layer-input sublayer), bias (every constant on the way: W_O's and the
    norms' biases, the projection's own bias), clip (OLMo's q/k clamp: what the clamp changed)."""

    kind: str
    layer: int | None = None
    head: int | None = None
    what: str = ""

    @property
    def key(self) -> str:
        if self.kind == "head":
            return f"L{self.layer}.H{self.head}"
        if self.kind in ("attn", "ffn", "mixer", "ple"):
            return f"L{self.layer}.{self.kind}"
        return self.kind

    def name(self, token: str = "", position: int | None = None) -> str:
        """The part in words: "head 0.1's output", "the embedding of '·Mary'", "layer 2's Mamba-2 output"."""
        if self.kind == "head":
            return f"head {self.layer}.{self.head}'s output"
        if self.kind == "attn":
            return f"block {self.layer}'s attention output"
        if self.kind == "ffn":
            return f"block {self.layer}'s FFN output"
        if self.kind == "mixer":
            return f"layer {self.layer}'s {self.what or 'recurrent'} output"
        if self.kind == "ple":
            return f"layer {self.layer}'s per-layer input"
        return {"embed": f"embedding of {token}" if token else "token embedding",
                "pos": f"position {position}" if position is not None else "position vector",
                "type": "segment embedding", "bias": "biases", "clip": "clamp"}.get(self.kind, self.kind)


def attention_layer(cfg, layer: int, what: str) -> None:
    """Refuse, in one line, ``what`` (a score, a head's output) on a layer that has no attention."""
    from explorer.core.plan import MIXER_NAMES

    plan = cfg.layer(layer)
    if plan.mixer == "none":
        raise SplitError(f"layer {layer} has no token mixer (an FFN-only block): it has no {what}")
    if not plan.is_attention:
        raise SplitError(f"layer {layer} is a {MIXER_NAMES[plan.mixer]} layer, not attention: it has no {what}; its "
                         f"effective attention (blocks.{layer}.mixer.effective_attention) shows what it reads")


def key_layer(cfg, layer: int) -> int:
    """The layer whose keys and values block ``layer`` attends with: its own, or (Gemma 4's KV sharing) the earlier
    layer that computed them."""
    source = cfg.layer(layer).kv_from
    return layer if source is None else source


def stream_notes(cfg, parts: list[Part]) -> list[str]:
    """What the parts of the stream assume where a model's blocks are not plain attention and FFN, in sentences."""
    out = []
    kinds = {(p.kind, p.what) for p in parts}
    recurrent = sorted({what for kind, what in kinds if kind == "mixer"} - ({"Mamba-2"} if cfg.parallel_ssm else set()))
    if recurrent:
        out.append(f"A {' or '.join(recurrent)} layer is not linear in its input: its whole output is one part "
                   "(its effective attention shows which earlier tokens it mixes).")
    if cfg.parallel_ssm and ("mixer", "Mamba-2") in kinds:
        out.append("Each block's Mamba-2 scan runs beside its attention on the same input: its output is one part.")
    if cfg.attn_output_gate and any(p.kind in ("head", "attn") for p in parts):
        out.append("Each head's output is multiplied by its sigmoid gate (one number per head, position and "
                   "dimension, computed from the block's input): the gate is taken as computed, so each head's "
                   "part is its gated output.")
    if any(p.kind == "ple" for p in parts):
        out.append("Each block's per-layer-input sublayer (Gemma 4) is one part.")
    if cfg.layer_scalars:
        out.append("The stream leaving each block is multiplied by the block's layer scalar: each part counts "
                   "times the scalars of its block and of every later block on the way.")
    return out


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


def _attention_parts(trace: Trace, model: Transformer, layer: int, position: int, A: np.ndarray, by: str,
                     embed_only: bool, tol: float) -> tuple[list[Part], list[np.ndarray], np.ndarray]:
    """Attention block ``layer``'s parts (its heads, or their sum; Falcon-H1's scan beside them) read through
    ``A`` [d, k], and what its constants add (W_O's bias, the output norm's bias: dla.attention_writes)."""
    from explorer.core.analysis.dla import attention_writes

    plan, k = model.cfg.layer(layer), A.shape[1]
    heads = [Part("attn", layer)] if by == "layer" else [Part("head", layer, h) for h in range(plan.n_heads)]
    scan = [Part("mixer", layer, what="Mamba-2")] if plan.parallel_ssm else []
    if embed_only:
        return heads + scan, [np.zeros(k)] * len(heads + scan), np.zeros(k)
    writes = attention_writes(trace, model, layer, position)
    _check(writes.output, trace[f"blocks.{layer}.attn.out"][position], f"block {layer}'s attention output", tol)
    Aw = writes.pull(A)
    read = writes.heads @ Aw                                      # [H, k]
    values = [read.sum(0)] if by == "layer" else list(read)
    if writes.scan is not None:
        values.append(writes.scan @ Aw)
    return heads + scan, values, writes.constant @ A


def read_stream(trace: Trace, model: Transformer, layer: int, position: int, reader: np.ndarray,
                by: str = "head", embed_only: bool = False) -> tuple[list[Part], np.ndarray]:
    """The parts of the stream entering block ``layer`` at ``position``, each read through ``reader`` [d, k].

    Returns (parts, values [P, k]) in the order embedding, position, segment, then block by block its heads
    (``by="layer"``: a block's heads as one part) or its recurrent mixer's whole output, its FFN and its per-layer
    input, and last the constants (``bias``). Each part is read times the layer scalars of its block and every
    later block before ``layer`` (Gemma 4: dla.scalars_after). The values add up to ``resid_pre[position] @
    reader`` (the stream itself where every block is pre-norm; its reading through the frozen norms otherwise).
    ``embed_only``: only the embedding parts' values are computed (the reader is still carried back through
    every norm; the other values and the constants are left zero).
    """
    from explorer.core.analysis.dla import scalars_after
    from explorer.core.plan import MIXER_NAMES

    cfg = model.cfg
    if by not in ("head", "layer"):
        raise ValueError("by must be 'head' or 'layer'")
    tol = tolerance(trace)
    A = np.asarray(reader, dtype=np.float64)                     # through every later norm, before the scalars
    k = A.shape[1]
    bias = np.zeros(k)
    blocks: list[tuple[list[Part], list[np.ndarray]]] = []
    factor = scalars_after(model, layer)

    def recorded(site: str, At: np.ndarray) -> np.ndarray:
        return np.zeros(k) if embed_only else trace[site][position].astype(np.float64) @ At

    for layer_ in reversed(range(layer)):
        blk, plan = model.blocks[layer_], cfg.layer(layer_)
        post = not _pre_norm(model, layer_) and blk.ln1 is not None
        if post and cfg.parallel_residual:
            raise SplitError("a parallel block with post-norms: no model here has one, so its split is not written")
        parts: list[Part] = []
        values: list[np.ndarray] = []
        F = float(factor[layer_])
        if blk.ple is not None:                          # Gemma 4: added after the FFN, before the layer scalar
            parts.append(Part("ple", layer_))
            values.append(recorded(f"blocks.{layer_}.ple.out", A * F))
        if plan.has_ffn:  # a dense FFN or a mixture of experts: its mlp.out is what it added
            if post and blk.ln2 is not None:
                n2 = frozen_at(trace, blk.ln2, f"blocks.{layer_}.ln2", position)
                bias = bias + F * n2.bias_read(A)
                A = n2.pull(A)
            parts[:0], values[:0] = [Part("ffn", layer_)], [recorded(f"blocks.{layer_}.mlp.out", A * F)]
        if post:
            n1 = frozen_at(trace, blk.ln1, f"blocks.{layer_}.ln1", position)
            bias = bias + F * n1.bias_read(A)
            A = n1.pull(A)
        if plan.is_attention:
            mixed, read, constant = _attention_parts(trace, model, layer_, position, A * F, by, embed_only, tol)
            bias = bias + constant
        elif plan.mixer != "none":                       # a recurrent layer: its whole output, one part
            mixed = [Part("mixer", layer_, what=MIXER_NAMES[plan.mixer])]
            read = [recorded(f"blocks.{layer_}.attn.out", A * F)]
        else:                                            # Nemotron-H: an FFN-only block
            mixed, read = [], []
        parts[:0], values[:0] = mixed, read
        blocks.append((parts, values))
    F = float(factor[0]) if layer else 1.0
    first_parts: list[Part] = []
    first_values: list[np.ndarray] = []
    if model.ln_embed is not None:
        ne = frozen_at(trace, model.ln_embed, "ln_embed", position)
        bias = bias + F * ne.bias_read(A)
        A = ne.pull(A)
    embed = trace["embed"][position].astype(np.float64) * float(cfg.embed_scale)
    first_parts.append(Part("embed"))
    first_values.append(embed @ (A * F))
    for kind, key in (("pos", "pos_embed"), ("type", "type_embed")):
        if key in trace:
            first_parts.append(Part(kind))
            first_values.append(trace[key][position].astype(np.float64) @ (A * F))
    parts = first_parts + [p for block_parts, _ in reversed(blocks) for p in block_parts] + [Part("bias")]
    values = first_values + [v for _, block_values in reversed(blocks) for v in block_values] + [bias]
    return parts, np.stack(values)
