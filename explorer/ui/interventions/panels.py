"""Where the existing panels offer right-click ablation (one ``install_*`` call each).

* attention: a head tile of the all-heads overview, a cell of the head-statistics heatmap;
* neurons: a column of the layer's neuron heatmap (the neuron at every position);
* residual: a cell of the norms heatmap (the stream entering block l at one position; the last
  row is the stream after the last block).
"""

from __future__ import annotations

from typing import Any

from explorer.core.interventions.spec import Intervention
from explorer.ui.interventions.menu import install


def install_attention(panel: Any) -> None:
    def locate_tile(pos: Any):
        picked = panel.head_at_scene(pos) if panel.trace is not None else None
        return None if picked is None else ("head", picked[0], picked[1], None, f"head {picked[0]}.{picked[1]}")

    def on_tile(iv: Intervention) -> list[tuple[float, float]]:
        if iv.target != "head" or panel.geometry is None:
            return []
        return [panel.geometry.tile_center(iv.layer, iv.index)]

    install(panel, panel.overview_plot, locate_tile, on_tile)

    def locate_cell(pos: Any):
        cell = panel.statistics.cell_at(pos)
        return None if cell is None else ("head", cell[0], cell[1], None, f"head {cell[0]}.{cell[1]}")

    install(panel, panel.statistics.plot, locate_cell,
            lambda iv: [(iv.index + 0.5, iv.layer + 0.5)] if iv.target == "head" else [])


def install_neurons(panel: Any) -> None:
    def locate(pos: Any):
        cell = panel.heatmap.cell_at(pos)
        if cell is None or not 0 <= cell[1] < panel.columns().size:
            return None
        neuron = int(panel.columns()[cell[1]])
        return "neuron", panel.layer(), neuron, None, f"neuron {panel.layer()}:{neuron}"

    def marks(iv: Intervention) -> list[tuple[float, float]]:
        if iv.target != "neuron" or iv.layer != panel.layer() or panel.trace is None:
            return []
        where = (panel.columns() == iv.index).nonzero()[0]
        rows = panel.heatmap.matrix.shape[0]
        return [(float(where[0]) + 0.5, r + 0.5) for r in range(rows)] if where.size else []

    install(panel, panel.heatmap.plot, locate, marks)


def install_residual(panel: Any) -> None:
    def locate(pos: Any):
        cell = panel.norm_map.cell_at(pos)
        if cell is None:
            return None
        row, col = cell
        return "resid", row, None, (col,), f"the residual stream {panel._labels[row]} at position {col}"

    def marks(iv: Intervention) -> list[tuple[float, float]]:
        if iv.target != "resid" or panel.trace is None:
            return []
        cols = range(panel.trace.n_tokens) if iv.positions is None else iv.positions
        return [(p + 0.5, iv.layer + 0.5) for p in cols]

    install(panel, panel.norm_map.plot, locate, marks)
