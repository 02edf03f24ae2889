"""What the Attention panel's detail does with each kind of layer (``AttentionPanel`` calls these with itself):

* ``follow_layer_kind``: the pattern / scores buttons apply to attention layers only; on a recurrent layer they
  are disabled and say why (its effective attention is shown: it has no scores);
* ``show_no_mixer``: a block without a token mixer (Nemotron-H's FFN blocks) has no weights over tokens: the detail
  says so instead of drawing anything;
* ``recurrent_map_ready``: a recurrent head's whole map for the detail, at once for a short prompt, else on a
  worker;
* ``long_recurrent_row``: one query row of a long prompt's recurrent head, computed on a worker (tens of ms for
  a DeltaNet head at 1024 tokens) and kept for the next switch;
* ``draw_query_row``: the selected query's row as bars (a pattern's in one colour, signed values red / blue).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QRectF

from explorer.core.analysis import effective_tiles
from explorer.core.display.levels import finite_extent, kept_ticks
from explorer.core.display.tokens import quoted
from explorer.ui.panels.attention import effective
from explorer.ui.panels.attention.long_detail import is_long, row_bars
from explorer.ui.panels.attention.views import BAR_NEGATIVE, BAR_PATTERN, BAR_POSITIVE, KINDS
from explorer.ui.widgets.plots import set_x_range
from explorer.ui.widgets.role_bands import set_plot_bands, trace_bands

if TYPE_CHECKING:
    from explorer.ui.panels.attention.panel import AttentionPanel

KIND_TIPS = {"pattern": "softmax weights: each row sums to 1",
             "scores": "q\u00b7k / \u221ad_head (plus ALiBi's bias where the model has one) before the softmax; "
                       "masked cells hatched"}
ROWS_KEPT = 64  # a long recurrent head's rows kept per trace (a token switch back is at once)


def follow_layer_kind(panel: AttentionPanel, kind: str | None) -> None:
    """Enable the pattern / scores buttons on an attention layer; on a recurrent one, disable them and say why."""
    for name, button in panel.kind_buttons.items():
        button.setEnabled(kind is None)
        button.setToolTip(KIND_TIPS[name] if kind is None else
                          f"this is a {kind} layer: it has no attention {name}; the detail shows its effective "
                          "attention, the weights of the sum over earlier tokens it computes")


def show_no_mixer(panel: AttentionPanel, layer: int) -> None:
    """The detail of a block without a token mixer: nothing to draw, and why."""
    panel.detail_stack.setCurrentWidget(panel.detail)
    panel.detail.set_data(np.zeros((0, 0), np.float32))
    panel.detail.plot.setTitle(f"L{layer}: no token mixer (this block is only an FFN): no weights over tokens")
    panel.row_bars.setOpts(x=[], height=[], width=0.8)
    panel.row_values = np.zeros(0, dtype=np.float32)
    panel.row_plot.setTitle("")
    panel._detail_shown = None


def recurrent_map_ready(panel: AttentionPanel, layer: int, head: int) -> bool:
    """Whether a recurrent head's map is at hand for the detail (a short prompt's is computed at once); else it is
    computed on a worker (tens of ms for a DeltaNet head of a few hundred tokens) and the detail drawn then."""
    if (layer, head) in panel._head_cache or panel.trace.n_tokens <= effective.CHEAP_TOKENS:
        return True
    panel.detail.plot.setTitle(f"L{layer} H{head}: computing\u2026")
    trace = panel.trace

    def keep(matrix: np.ndarray) -> None:
        panel._head_cache[(layer, head)] = (matrix, None)
        panel._draw_detail()

    panel.later(("detail",), lambda _check: effective.head_map(trace, layer, head), keep, priority=0)
    return False


def long_recurrent_row(panel: AttentionPanel, layer: int, head: int, i: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Query ``i``'s row of a long prompt's recurrent head and its mask (later keys), or None while a worker
    computes it (the bars are drawn again then)."""
    trace = panel.trace
    key = (layer, head, i)
    values = panel._rows.get(key)
    if values is None:
        def keep(row: np.ndarray) -> None:
            while len(panel._rows) >= ROWS_KEPT:
                panel._rows.pop(next(iter(panel._rows)))
            panel._rows[key] = row
            panel._draw_query_row()

        panel.later(("row",), lambda _check: effective_tiles.weights_row(trace, layer, head, i), keep, priority=0)
        return None
    later = np.arange(values.shape[0]) > i if trace.config.causal else np.zeros(values.shape[0], bool)
    return values, later


def draw_query_row(panel: AttentionPanel) -> None:
    """The selected query's row as bars over the keys (a long prompt's: the largest of each few keys)."""
    trace = panel.trace
    i, layer = panel.query_row(), panel.layer_head()[0]
    tokens = trace.tokens
    got = panel._query_values(i)
    if got is None:
        panel.row_bars.setOpts(x=[], height=[], width=0.8)
        panel.row_plot.setTitle(f"query {quoted(tokens[i])} ({i}): computing\u2026")
        return
    recurrent = effective.kind_of(trace, layer) is not None
    values, masked_row = got
    n = values.shape[0]
    panel.row_values = values
    x, heights, f = row_bars(values, masked_row, max(64, panel.row_plot.width()) if is_long(trace) else n)
    if panel.kind == "pattern" and not recurrent:  # one colour: pyqtgraph fills every bar in one call (a brush per
        colours = dict(brush=BAR_PATTERN, brushes=None)  # bar draws them one by one: ~5 ms a token switch at 1,024)
    else:
        colours = dict(brushes=[BAR_NEGATIVE if h < 0 else BAR_POSITIVE for h in heights])
    panel.row_bars.setOpts(x=x, height=heights, width=0.8 * f, **colours)
    (panel.long_query_outline if is_long(trace) else panel.query_outline).setRect(QRectF(0, i, n, 1))
    quantity = effective.row_title(trace, layer) if recurrent else KINDS[panel.kind][0]
    name = quantity + (f" (largest of each {f} keys)" if f > 1 else "")
    earlier = masked_row[:i].any()  # a sliding window hides keys before the query too
    later = (" (keys outside its window masked)" if earlier
             else " (later keys masked)" if masked_row.any() else "")
    panel.row_plot.setTitle(f"query {quoted(tokens[i])} ({i}): {name} over the keys{later}")
    panel.row_plot.getAxis("bottom").setTicks([kept_ticks(tuple(tokens), max(2, min(40, n)), 8)])
    set_plot_bands(panel.row_plot, bottom=trace_bands(panel.trace))  # a conversation's roles under the keys
    lo, hi = finite_extent(heights)
    set_x_range(panel.row_plot, 0, max(n, 1), padding=0.01)  # (the same keys again: kept)
    panel.row_plot.setYRange(lo, hi if hi > lo else lo + 1, padding=0.05)
