"""Where a forward pass stopped being finite: the first NaN or infinity, in the order the model computed.

A model with NaN weights, or a checkpoint whose numbers overflow, still produces a Trace; the
panels show its NaNs as they are, and this names where they start (``first_nonfinite``), for the
window's status line, ``export`` and a notebook.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.display.levels import all_finite
from explorer.core.trace import Trace

# inside a block, in the order block_forward computes them
_BLOCK_ORDER = ("resid_pre", "ln1.mean", "ln1.var", "ln1.mean_square", "attn.q", "attn.k", "attn.v", "attn.z",
                "attn.out", "resid_mid", "ln2.mean", "ln2.var", "ln2.mean_square", "mlp.pre", "mlp.post", "mlp.out")


@dataclass(frozen=True)
class NonFinite:
    key: str  # the trace key where it first appears
    layer: int | None  # None: before the first block (embeddings) or after the last (final norm, logits)
    position: int  # the first token position holding it
    what: str  # "NaN" or "infinity"

    def describe(self) -> str:
        where = f"layer {self.layer}" if self.layer is not None else (
            "the embeddings" if self.key in ("embed", "pos_embed") else "the final norm / un-embedding")
        return f"{self.what} first appears in {where} ({self.key}, position {self.position})"


def forward_order(trace: Trace) -> list[str]:
    """The stored keys, in the order the forward pass computed them."""
    stored = set(trace.stored_keys())
    order = [k for k in ("embed", "pos_embed") if k in stored]
    for layer in range(trace.config.n_layers):
        order += [f"blocks.{layer}.{site}" for site in _BLOCK_ORDER if f"blocks.{layer}.{site}" in stored]
    order += [k for k in ("resid_final", "ln_final.mean", "ln_final.var", "ln_final.mean_square") if k in stored]
    return order


def _layer_of(key: str) -> int | None:
    return int(key.split(".")[1]) if key.startswith("blocks.") else None


def first_nonfinite(trace: Trace, check_logits: bool = True) -> NonFinite | None:
    """The first stored value that is NaN or infinite, in forward order; then the logits (derived if need be)."""
    keys = forward_order(trace)
    if check_logits and "logits" in trace:
        keys.append("logits")
    for key in keys:
        array = np.asarray(trace[key])
        if all_finite(array):
            continue
        bad = ~np.isfinite(array)
        if bad.any():
            # position: the token axis is the first for [n, ...] arrays and the second for per-head [H, n, d]
            axis = 1 if key.endswith(("attn.q", "attn.k", "attn.v", "attn.z")) and array.ndim == 3 else 0
            rows = np.flatnonzero(bad.any(axis=tuple(i for i in range(array.ndim) if i != axis)))
            what = "NaN" if np.isnan(array).any() else "infinity"
            return NonFinite(key, _layer_of(key), int(rows[0]), what)
    return None
