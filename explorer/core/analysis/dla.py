"""Direct logit attribution: how much each head and each FFN writes directly into one token's logit.

In a pre-norm transformer the stream after the last block is a sum,

    resid_final = resid_pre[0] + sum_l (sum_h W_O,h z_h + b_O) + sum_l mlp_out_l

and the final norm is linear in it once its scale is frozen at the value it had
(LayerNorm: (x - mean x) / sigma * w + b with sigma = sqrt(var(resid_final) + eps); RMSNorm: x / rms * w).
So the logit of token t at position p splits exactly into one term per piece:

    logit = embed + sum(heads) + sum(attn_bias) + sum(mlp) + norm_bias (+ unembed_bias)

each term being norm_frozen(piece) . W_U[t]. With a ``distractor`` the direction is
W_U[t] - W_U[distractor] and the terms add up to the logit difference.

A norm on a sublayer's output (Gemma 2-4, OLMo 2, EXAONE 4) is frozen the same way, at its own input's
scale, so each head keeps its term. A recurrent layer (DeltaNet, Mamba-2, a convolution) is one ``mixer`` term,
Gemma 4's per-layer inputs one ``per_layer`` term per block, and its layer scalars multiply every term written in
a block by the scalars of that block and every later one (the embedding by all of them). With soft-capped logits
the terms add up to the logit before the cap (``softcap``: the model shows cap * tanh(logit / cap)).

Architectures where the pieces are not a plain sum (post-norm blocks) are refused: :func:`direct_logit_attribution`
checks that its terms add up to the logit the model computed and raises :class:`DLAError` otherwise, rather than
show a wrong number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.frozen import FrozenNorm, freeze
from explorer.core.errors import ExplorerError
from explorer.core.per_layer import scale_of
from explorer.core.placement import weights_of

if TYPE_CHECKING:
    from explorer.core.model import Norm, Transformer
    from explorer.core.trace import Trace


class DLAError(ExplorerError):
    """Direct logit attribution does not apply (the model's pieces do not add up to its logits)."""


@dataclass(frozen=True)
class DLA:
    heads: np.ndarray        # [L, H] each head's term
    attn_bias: np.ndarray    # [L] each attention sublayer's output bias
    mlp: np.ndarray          # [L] each FFN's term (its bias included); zeros without FFNs
    embed: float             # the stream entering block 0 (token and position embeddings)
    norm_bias: float         # the final LayerNorm's bias (0 for RMSNorm)
    unembed_bias: float
    logit: float             # what the model computed: the target's logit (minus the distractor's); before the cap
    position: int
    target: int
    distractor: int | None
    mixer: np.ndarray | None = None      # [L] a recurrent layer's whole output (DeltaNet, Mamba-2, convolution)
    per_layer: np.ndarray | None = None  # [L] Gemma 4's per-layer-input sublayers
    softcap: float | None = None         # the logits' soft cap: the model shows cap * tanh(logit / cap)

    @property
    def total(self) -> float:
        extra = sum(float(a.sum()) for a in (self.mixer, self.per_layer) if a is not None)
        return float(self.embed + self.heads.sum() + self.attn_bias.sum() + self.mlp.sum()
                     + self.norm_bias + self.unembed_bias + extra)


def _param(t: object) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()  # type: ignore[attr-defined]


def final_norm(trace: Trace, model: Transformer, position: int) -> FrozenNorm | None:
    """The final norm with its scale frozen at ``position`` (computed from ``resid_final`` in float64), None
    without one: the linear map every direct effect on the logits goes through."""
    if model.ln_final is None:
        return None
    resid_final = trace["resid_final"][position].astype(np.float64)
    ln = model.ln_final
    spread = resid_final.var() if ln.kind == "layernorm" else (resid_final ** 2).mean()
    return freeze(ln, float(np.sqrt(spread + ln.eps)), what="the final norm")


def final_reader(trace: Trace, model: Transformer, position: int, u: np.ndarray) -> tuple[np.ndarray, float]:
    """(r, norm_bias): a write x into the stream at ``position`` moves the logit direction ``u`` [d] (a row of
    W_U, or the difference of two, times the logit scale) by x @ r through the frozen final norm; the norm's
    bias adds norm_bias."""
    norm = final_norm(trace, model, position)
    if norm is None:
        return u, 0.0
    return norm.pull(u[:, None])[:, 0], float(norm.bias_read(u[:, None])[0])


def _head_outputs(W_O, z: np.ndarray) -> np.ndarray:
    """What each head writes into the stream at one position, W_O[:, h] @ z[h]: [H, d] float64. The
    products run in float32 (float64 weights stay float64) on the model's own tensor: converting every
    layer's W_O to float64 would cost more than the whole attribution."""
    import torch

    H, dh = z.shape
    weight = W_O.detach()
    if weight.dtype not in (torch.float32, torch.float64):
        weight = weight.float()
    with torch.inference_mode():
        zt = torch.as_tensor(np.ascontiguousarray(z), device=weight.device).to(weight.dtype)
        blocks = torch.block_diag(*zt[:, :, None])       # [H*dh, H]: head h's z in its own column
        out = (weight @ blocks).T                         # [H, d]: one matmul for every head
    return out.double().cpu().numpy()


def scalars_after(model: Transformer, upto: int | None = None) -> np.ndarray:
    """What each block's writes are multiplied by on their way to the stream entering block ``upto`` (the last
    stream when None): the layer scalars of that block and of every later block before ``upto`` (Gemma 4 scales
    the whole stream leaving a block; ones for every other model). [upto]; the embedding's factor is element 0."""
    stop = model.cfg.n_layers if upto is None else upto
    scalars = np.array([scale_of(blk) for blk in model.blocks[:stop]], dtype=np.float64)
    return np.cumprod(scalars[::-1])[::-1]


def output_norm(norm: Norm | None, x: np.ndarray, what: str = "") -> FrozenNorm | None:
    """A sublayer's output norm (Gemma 2-4's sandwich, OLMo 2's) with its scale frozen at the scale of its own
    input ``x`` [d] (the sublayer's whole output at this position, float64): exact for x, and linear, so each part
    of x keeps its share. None without one."""
    if norm is None:
        return None
    spread = x.var() if norm.kind == "layernorm" else (x ** 2).mean()
    return freeze(norm, float(np.sqrt(spread + norm.eps)), what=what)


@dataclass(frozen=True)
class AttentionWrites:
    """What an attention sublayer writes at one position, before its output norm and the residual scale."""

    heads: np.ndarray            # [H, d] each head's W_O[:, h] z_h (z after any output gate)
    bias: np.ndarray             # [d] W_O's bias (zeros without one)
    scan: np.ndarray | None      # [d] Falcon-H1: the Mamba-2 scan's output beside the heads
    norm: FrozenNorm | None      # the output norm, frozen at the scale of the whole sum (``output_norm``)
    scale: float                 # the residual scale (Granite)

    def added(self, x: np.ndarray) -> np.ndarray:
        """What a part ``x`` [..., d] of the sum adds to the stream: residual scale x frozen norm (bias apart)."""
        return self.scale * (x if self.norm is None else self.norm.apply(x))

    def pull(self, reader: np.ndarray) -> np.ndarray:
        """The reader [d, k] of the sum's parts that reads what ``reader`` reads off the stream."""
        return self.scale * (reader if self.norm is None else self.norm.pull(reader))

    @property
    def constant(self) -> np.ndarray:
        """What the sublayer adds whatever its heads write: W_O's bias through the norm, and the norm's bias."""
        out = self.added(self.bias)
        return out if self.norm is None or self.norm.bias is None else out + self.scale * self.norm.bias

    @property
    def output(self) -> np.ndarray:
        """The sublayer's whole output as added to the stream (the recorded ``attn.out``)."""
        written = self.heads.sum(0) + (self.scan if self.scan is not None else 0.0)
        return self.added(written) + self.constant


def attention_writes(trace: Trace, model: Transformer, layer: int, position: int) -> AttentionWrites:
    """Attention layer ``layer``'s writes at ``position`` from its recorded z (and Falcon-H1's ``mixer.out``), with its
    output norm frozen at their sum: the one rule every split of a head's output follows."""
    cfg, blk = model.cfg, model.blocks[layer]
    with weights_of(blk.attn.W_O) as W_O:
        per_head = _head_outputs(W_O.weight, trace[f"blocks.{layer}.attn.z"][:, position])
        b_O = _param(W_O.bias) if W_O.bias is not None else np.zeros(cfg.d_model)
    scan = trace[f"blocks.{layer}.mixer.out"][position].astype(np.float64) if cfg.layer(layer).parallel_ssm else None
    total = per_head.sum(0) + b_O + (scan if scan is not None else 0.0)
    norm = output_norm(blk.ln1_out, total, f"block {layer}'s attention output norm")
    return AttentionWrites(per_head, b_O, scan, norm, float(getattr(cfg, "residual_scale", 1.0)))


def direct_logit_attribution(trace: Trace, target: int, position: int = -1, distractor: int | None = None,
                             model: Transformer | None = None) -> DLA:
    from explorer.core import arguments
    from explorer.core.trace import Trace

    arguments.instance(trace, Trace, "trace", "a Trace (LoadedModel.trace)")
    target = arguments.whole(target, "target", 0)
    distractor = arguments.whole(distractor, "distractor", 0, none=True)
    position = arguments.whole(position, "position")
    model = model if model is not None else trace._model
    if model is None:
        raise DLAError("direct logit attribution needs the model: this trace was loaded without it")
    cfg = trace.config
    if cfg.norm != "none" and cfg.norm_placement == "post":
        raise DLAError("direct logit attribution needs a pre-norm model: here each block normalises its output")
    logit_scale = float(getattr(cfg, "logit_scale", 1.0))       # Granite: logits times a constant
    n = trace.n_tokens
    p = position % n
    L, H = cfg.n_layers, cfg.n_heads
    with weights_of(model.unembed) as unembed:  # (real even when offloaded: core/placement.py)
        W_U = unembed.weight  # only the target's (and distractor's) rows: the whole matrix is V x d
        u = logit_scale * (_param(W_U[target]) - (_param(W_U[distractor]) if distractor is not None else 0.0))  # [d]

    r, norm_bias = final_reader(trace, model, p, u)  # a write x moves the logit (difference) by x @ r

    heads = np.zeros((L, H))
    attn_bias, mlp, mixer, per_layer = np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L)
    after = scalars_after(model)  # Gemma 4: what block l writes reaches the end times its scalar and every later one
    pieces = trace["blocks.0.resid_pre"][p].astype(np.float64) * (after[0] if L else 1.0)
    embed = float(pieces @ r)
    for layer in range(L):
        blk, plan, factor = model.blocks[layer], cfg.layer(layer), float(after[layer])
        if plan.is_attention:  # each head's write W_O z_h (z after any output gate), through a frozen output norm
            writes = attention_writes(trace, model, layer, p)
            per_head = factor * writes.added(writes.heads)
            constant = factor * writes.constant
            heads[layer, :len(per_head)] = per_head @ r
            attn_bias[layer] = float(constant @ r)
            attn_out = per_head.sum(0) + constant
            if writes.scan is not None:  # Falcon-H1: the Mamba-2 scan beside the attention, one term
                ssm_out = factor * writes.added(writes.scan)
                mixer[layer] = float(ssm_out @ r)
                attn_out = attn_out + ssm_out
            _check(attn_out, factor * trace[f"blocks.{layer}.attn.out"][p], f"layer {layer}'s attention output")
        elif plan.mixer != "none":  # a recurrent layer: its whole output, one term
            attn_out = factor * trace[f"blocks.{layer}.attn.out"][p].astype(np.float64)
            mixer[layer] = float(attn_out @ r)
        else:
            attn_out = 0.0
        pieces = pieces + attn_out
        if plan.has_ffn:
            mlp_out = factor * trace[f"blocks.{layer}.mlp.out"][p].astype(np.float64)
            mlp[layer] = float(mlp_out @ r)
            pieces = pieces + mlp_out
        if blk.ple is not None:
            ple_out = factor * trace[f"blocks.{layer}.ple.out"][p].astype(np.float64)
            per_layer[layer] = float(ple_out @ r)
            pieces = pieces + ple_out
    _check(pieces, trace["resid_final"][p].astype(np.float64), "the residual stream")
    unembed_bias = 0.0
    bias = getattr(model.unembed, "bias", None)
    if bias is not None:
        b = _param(bias)
        unembed_bias = logit_scale * float(b[target] - (b[distractor] if distractor is not None else 0.0))
    logits = trace["logits"][p].astype(np.float64)
    cap = cfg.final_softcap
    if cap is not None:  # Gemma 2 / 4: the pieces add up to the logits before the cap (cap * atanh(shown / cap))
        logits = cap * np.arctanh(np.clip(logits / cap, -1 + 1e-12, 1 - 1e-12))
    logit = float(logits[target] - (logits[distractor] if distractor is not None else 0.0))
    result = DLA(heads, attn_bias, mlp, embed, norm_bias, unembed_bias, logit, p, target, distractor,
                 mixer if mixer.any() else None, per_layer if model.ple is not None else None, cap)
    _check(np.array([result.total]), np.array([logit]), "the logit")
    return result


def _check(ours: np.ndarray, model: np.ndarray, what: str) -> None:
    scale = max(1.0, float(np.abs(model).max()))
    if float(np.abs(ours - model).max()) > 2e-3 * scale:
        raise DLAError(f"direct logit attribution does not apply to this model: its pieces do not add up "
                       f"to {what} (the sublayers' outputs are not a plain sum into the stream)")
