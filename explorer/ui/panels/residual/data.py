"""The residual panel's tooltips and exported data (``ResidualData``, a mixin of ``ResidualPanel``): each reads
the arrays the panel drew (``norms``, ``contributions``, ``cosine``, its labels) and its trace."""

from __future__ import annotations

import numpy as np

from explorer.core.display.labels import token_labels
from explorer.core.display.tokens import quoted
from explorer.ui.panels.residual.view import mixer_name
from explorer.ui.widgets.heatmap import format_value


class ResidualData:
    """Tooltips and exports of the norms, the norm line, the sublayer bars and the cosines."""

    # --- tooltips --------------------------------------------------------------------------------
    def _where(self, row_label: str, col: int) -> str:
        return f"{row_label}, {quoted(self.trace.tokens[col])} ({col})"

    def _norm_text(self, row: int, col: int) -> str:
        return f"{self._where(self._labels[row], col)}: \u2016x\u2016 = {format_value(self.norms[row, col])}"

    def _cosine_text(self, row: int, col: int) -> str:
        return (f"block {row}, {quoted(self.trace.tokens[col])} ({col}): cosine of the stream entering and "
                f"leaving = {format_value(self.cosine[row, col])}")

    # --- exported data ---------------------------------------------------------------------------
    def _norms_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """‖x‖ [L+1, n]: boundaries x tokens."""
        return self.norms, list(self._labels), token_labels(self.trace.tokens)

    def _norm_line_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's ‖x‖ over the L+1 boundaries."""
        i = self.selected_token
        return self.norms[:, i], list(self._labels), [f"norm of {token_labels(self.trace.tokens)[i]}"]

    def _contributions_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """The selected token's ‖attention output‖ and ‖FFN output‖ per block: [L, 2] ([L, 1],
        attention only, for a model without FFN)."""
        cfg, i = self.trace.config, self.selected_token
        rows = [f"block {layer}" for layer in range(cfg.n_layers)]
        if self.contributions is None:
            return np.zeros((cfg.n_layers, 0), np.float32), rows, []
        names = [mixer_name(cfg), "FFN"] if cfg.has_ffn else [mixer_name(cfg)]
        keys = ["attn", "mlp"] if cfg.has_ffn else ["attn"]
        return np.stack([self.contributions[k][:, i] for k in keys], axis=1), rows, names

    def _cosine_data(self) -> tuple[np.ndarray, list[str], list[str]]:
        """Cosine of the stream entering and leaving each block [L, n]."""
        return self.cosine, [f"block {layer}" for layer in range(self.cosine.shape[0])], \
            token_labels(self.trace.tokens)
