"""What the residual panel's ``prepare`` returns (``ResidualView``) and how it is made on the worker
thread (``residual_view``): the norms, sublayer sizes and cosines (memoised with the trace), the logit
lens (memoised with the trace: whole when cheap, else empty and filled progressively) and, for a
complete lens, each cell's text for the snapshot's tokenizer (kept in the view: it depends on the
tokenizer, not on the trace alone)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.analysis import residual as core
from explorer.core.trace import Trace
from explorer.ui.panels.base import PanelSnapshot, PanelView
from explorer.ui.panels.residual.lens import lens_of, lens_texts


@dataclass(frozen=True)
class ResidualView(PanelView):
    """The residual panel's values for one trace; ``lens_texts`` [B][n] only for a complete lens."""

    labels: tuple[str, ...] = ()
    norms: np.ndarray | None = None
    contributions: dict[str, np.ndarray] | None = None
    cosine: np.ndarray | None = None
    lens: core.LogitLens | None = None
    lens_texts: tuple[tuple[str, ...], ...] = ()


def norms_of(trace: Trace) -> np.ndarray:
    return trace.memo(("residual.norms",), lambda: core.residual_norms(trace))


def cosine_of(trace: Trace) -> np.ndarray:
    return trace.memo(("residual.cosine",), lambda: core.consecutive_cosine(trace))


def contributions_of(trace: Trace) -> dict[str, np.ndarray] | None:
    def compute() -> dict[str, np.ndarray] | None:
        try:
            return core.sublayer_contributions(trace)
        except KeyError:  # neither stored nor derivable (a saved trace without its model)
            return None

    return trace.memo(("residual.contributions",), compute)


def residual_view(trace: Trace, snapshot: PanelSnapshot) -> ResidualView:
    """On the worker thread (large lenses: only an empty one, filled later by the panel)."""
    lens = lens_of(trace, snapshot.tokenizer)
    return ResidualView(trace, tuple(core.boundary_labels(trace.config.n_layers)), norms_of(trace),
                        contributions_of(trace), cosine_of(trace), lens,
                        tuple(tuple(row) for row in lens_texts(lens, snapshot.tokenizer)))


def mixer_name(cfg) -> str:
    """What the first sublayer of a block is called in the bars: "attention", or where some layers are recurrent
    (Gated DeltaNet, Mamba-2, a convolution: their output is ``attn.out`` too) "token mixer"."""
    from explorer.core.analysis.layer_maps import uniform

    return "attention" if uniform(cfg) else "token mixer"
