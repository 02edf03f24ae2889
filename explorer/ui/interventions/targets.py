"""What a panel offers to switch off: the components its drawings show, and where it marks them.

A panel that draws heads, neurons or residual cells answers through :class:`TargetPanel`: its
``intervention_targets()`` lists one :class:`Target` per drawing (a plot), each saying which
:class:`Component` lies under a scene point and where on that plot an intervention's component is
drawn. ``explorer.ui.interventions.menu`` turns these into the right-click entries and the red
crosses; nothing outside the panel reads its widgets or private names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import pyqtgraph as pg
from PySide6.QtCore import QPointF

from explorer.core.interventions.spec import Intervention

if TYPE_CHECKING:
    from explorer.ui.session.interventions import InterventionState
    from explorer.ui.widgets.heatmap import Heatmap

Point = tuple[float, float]
Kind = Literal["head", "neuron", "mlp", "resid"]


@dataclass(frozen=True)
class Component:
    """One thing a right-click can switch off: a head, a neuron, or the residual stream entering
    block ``layer`` at ``positions``; ``name`` is how the menu names it ("head 1.0")."""

    target: Kind
    layer: int
    index: int | None = None
    positions: tuple[int, ...] | None = None
    name: str = ""

    @property
    def key(self) -> tuple:
        """The same tuple as ``Intervention.component`` (what ``InterventionState`` looks up)."""
        return (self.target, self.layer, self.index, self.positions)

    def intervention(self, mode: str) -> Intervention:
        return Intervention(self.target, self.layer, self.index, mode, self.positions)

    @staticmethod
    def head(layer: int, head: int) -> Component:
        return Component("head", layer, head, None, f"head {layer}.{head}")

    @staticmethod
    def neuron(layer: int, neuron: int) -> Component:
        return Component("neuron", layer, neuron, None, f"neuron {layer}:{neuron}")

    @staticmethod
    def resid(layer: int, position: int, where: str) -> Component:
        """The stream entering block ``layer`` (``where`` names the boundary) at one position."""
        return Component("resid", layer, None, (position,), f"the residual stream {where} at position {position}")


@dataclass(frozen=True)
class Target:
    """One drawing of components on a panel: the plot, what is under a scene point, where marks go."""

    plot: pg.PlotItem
    component_at: Callable[[QPointF], Component | None]
    marks_for: Callable[[Intervention], list[Point]]


def head_cells(heatmap: Heatmap, heads: Callable[[], int] | None = None,
               is_head: Callable[[int, int], bool] | None = None) -> Target:
    """A layers x heads heatmap: cell (l, h) is head l.h. ``heads()``: how many of the columns are heads
    (the DLA map's last column is the FFN's, see ``ffn_column``); default all. ``is_head(l, h)``: whether the
    cell is an attention head at all (a hybrid's recurrent layers have none to switch off); default yes."""
    def at(scene_pos: QPointF) -> Component | None:
        cell = heatmap.cell_at(scene_pos)
        if cell is None or (heads is not None and cell[1] >= heads()) or (is_head is not None and not is_head(*cell)):
            return None
        return Component.head(*cell)

    return Target(heatmap.plot, at, lambda iv: [(iv.index + 0.5, iv.layer + 0.5)] if iv.target == "head" else [])


def ffn_column(heatmap: Heatmap, column: Callable[[], int | None]) -> Target:
    """The column of a layers x components heatmap whose cell (l, ``column()``) is layer l's FFN output."""
    def at(scene_pos: QPointF) -> Component | None:
        cell, col = heatmap.cell_at(scene_pos), column()
        return None if cell is None or cell[1] != col else Component("mlp", cell[0], None, None, f"FFN {cell[0]}")

    def marks(iv: Intervention) -> list[Point]:
        col = column()
        return [(col + 0.5, iv.layer + 0.5)] if iv.target == "mlp" and iv.positions is None and col is not None else []

    return Target(heatmap.plot, at, marks)


def resid_cells(heatmap: Heatmap) -> Target:
    """A layer boundaries x positions heatmap: row l is the stream entering block l (the last row, the
    stream after the last block), named by the heatmap's row labels."""
    def at(scene_pos: QPointF) -> Component | None:
        cell = heatmap.cell_at(scene_pos)
        return None if cell is None else Component.resid(cell[0], cell[1], heatmap.row_labels[cell[0]])

    def marks(iv: Intervention) -> list[Point]:
        n = heatmap.matrix.shape[1]
        if iv.target != "resid" or n == 0:
            return []
        return [(p + 0.5, iv.layer + 0.5) for p in (range(n) if iv.positions is None else iv.positions) if p < n]

    return Target(heatmap.plot, at, marks)


class TargetPanel(Protocol):
    """What a panel with switchable components provides (attention, FFN neurons, residual stream)."""

    interventions: InterventionState | None

    def intervention_targets(self) -> list[Target]: ...
