"""Headroom above the residual panel's sublayer bars for their legend (top right, inside the plot):
the y range is made tall enough that the tallest bar ends below the legend, and made again whenever
the plot is resized (a range computed for one dock height let the legend cover the last, tallest
bars of a Llama-1B-shaped model once the dock was made smaller)."""

from __future__ import annotations

from collections.abc import Callable

import pyqtgraph as pg

MIN_LEGEND_PX = 24.0  # a legend not laid out yet still gets a row's room
GAP_PX = 12.0  # its offset from the top and a little air under it
MAX_SHARE = 0.75  # the bars always keep a quarter of the plot


def legend_share(legend_px: float, plot_px: float) -> float:
    """The share of the plot's height above the tallest bar: the legend's height and a gap."""
    if plot_px <= 40:
        return 0.3
    return min(MAX_SHARE, (max(legend_px, MIN_LEGEND_PX) + GAP_PX) / plot_px)


class LegendHeadroom:
    """Keeps ``plot``'s y range at [0, top / (1 - share)] for ``top()`` (the tallest bar, or None for no bars)."""

    def __init__(self, plot: pg.PlotItem, legend: pg.LegendItem, top: Callable[[], float | None]) -> None:
        self.plot, self.legend, self.top = plot, legend, top
        plot.getViewBox().sigResized.connect(lambda *_: self.fit())

    def fit(self) -> None:
        top = self.top()
        if top is None:
            return
        share = legend_share(self.legend.boundingRect().height(), self.plot.getViewBox().height())
        y = [0, (top or 1.0) / (1 - share)]
        if self.plot.getViewBox().viewRange()[1] != y:  # the same range again: no view update
            self.plot.setYRange(*y, padding=0)
