"""The direct logit attribution as the panel draws it: one row per layer, a column per head, then one column per
other kind of term the model has (core/analysis/dla.py's ``DLA``):

* ``recurrent``: a recurrent or convolutional layer's whole output (Gated DeltaNet, Mamba-2, a short convolution:
  one term, it has no heads); Falcon-H1's column is its ``Mamba-2 scan`` beside the attention;
* ``FFN``: each layer's FFN (its bias included);
* ``per-layer input``: Gemma 4's per-layer-input sublayer.

A cell that is no term of its layer (a head column on a recurrent layer, an FFN on a block without one) is hatched
and its tooltip says why, never a 0 that reads as "writes nothing". The sentence above the map adds the terms up
to the logit, the soft cap and the layer scalars said where the model has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from explorer.core.analysis.dla import DLA
from explorer.core.display.tokens import quoted
from explorer.core.mixers.effective import effective_kind
from explorer.ui.widgets.heatmap import Heatmap

if TYPE_CHECKING:
    from explorer.core.config import ModelConfig
    from explorer.core.trace import Trace

FFN, RECURRENT, SCAN, PER_LAYER = "FFN", "recurrent", "Mamba-2 scan", "per-layer input"


def dla_table(d: DLA, cfg: ModelConfig) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(terms [L, columns] float64, which cells are no term of their layer [L, columns], the column labels)."""
    L, H = d.heads.shape
    plans = [cfg.layer(layer) for layer in range(L)]
    columns, masks = [d.heads], [np.array([[not (p.is_attention and h < p.n_heads) for h in range(H)] for p in plans])]
    labels = [f"H{h}" for h in range(H)]
    if d.mixer is not None:
        scans = [p.is_recurrent or p.parallel_ssm for p in plans]
        columns.append(d.mixer[:, None])
        masks.append(~np.array(scans)[:, None])
        labels.append(SCAN if all(p.parallel_ssm for p, s in zip(plans, scans) if s) else RECURRENT)
    if any(p.has_ffn for p in plans):
        columns.append(d.mlp[:, None])
        masks.append(~np.array([p.has_ffn for p in plans])[:, None])
        labels.append(FFN)
    if d.per_layer is not None:
        columns.append(d.per_layer[:, None])
        masks.append(np.zeros((L, 1), bool))
        labels.append(PER_LAYER)
    return np.concatenate(columns, axis=1), np.concatenate(masks, axis=1), labels


def why_not(cfg: ModelConfig, layer: int, column: str) -> str:
    """Why (layer, column) holds no term."""
    plan = cfg.layer(layer)
    if column == FFN:
        return "this block has no FFN"
    if column in (RECURRENT, SCAN):
        return "an attention layer: its terms are its heads'" if plan.is_attention else "this block has no token mixer"
    kind = effective_kind(cfg, layer)
    if kind is not None:
        return f"a {kind} layer has no attention heads: its whole output is the '{RECURRENT}' column"
    if plan.mixer == "none":
        return "this block has no token mixer"
    return f"layer {layer} has {plan.n_heads} heads"


def dla_sentence(d: DLA, trace: Trace, target: str) -> str:
    """The terms added up to the logit, in words (the soft cap and layer scalars where the model has them)."""
    cfg = trace.config
    parts = [f"heads {d.heads.sum():.3f}"]
    if d.mixer is not None:
        recurrent = any(cfg.layer(i).is_recurrent for i in range(cfg.n_layers))
        parts.append(f"{'recurrent layers' if recurrent else 'Mamba-2 scans'} {d.mixer.sum():.3f}")
    if any(cfg.layer(i).has_ffn for i in range(cfg.n_layers)):
        parts.append(f"FFNs {d.mlp.sum():.3f}")
    if d.per_layer is not None:
        parts.append(f"per-layer inputs {d.per_layer.sum():.3f}")
    parts += [f"embedding {d.embed:.3f}", f"biases {d.attn_bias.sum() + d.norm_bias + d.unembed_bias:.3f}"]
    where = f"after {d.position}:{quoted(trace.tokens[d.position])}"
    if d.softcap is not None:  # the terms add up to the logit before the cap; the model shows it capped
        shown = d.softcap * np.tanh(d.logit / d.softcap)
        head = (f"Logit of {target} {where} before the soft cap = {d.logit:.3f} (shown: {d.softcap:g}\u00b7tanh(logit"
                f"/{d.softcap:g}) = {shown:.3f}) = ")
    else:
        head = f"Logit of {target} {where} = {d.logit:.3f} = "
    scalars = "; each term times its block's layer scalar and every later one's" if cfg.layer_scalars else ""
    return head + " + ".join(parts) + f" (final norm's scale frozen{scalars}). Click a cell to select its head."


class DLAHeatmap(Heatmap):
    """The layers x terms map; a hatched cell's tooltip says why it holds no term (``masked_text``)."""

    config: ModelConfig | None = None

    def masked_text(self, row: int, col: int) -> str:
        return "no term" if self.config is None else f"no term ({why_not(self.config, row, self.col_labels[col])})"

    def cell_text(self, row: int, col: int) -> str:
        text = super().cell_text(row, col)
        if self.col_labels[col] == RECURRENT and self.config is not None and not self.masked[row, col]:
            text += f" (the whole output of this {effective_kind(self.config, row)} layer)"
        return text
