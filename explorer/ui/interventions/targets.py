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
    from explorer.ui.interventions.state import InterventionState

Point = tuple[float, float]
Kind = Literal["head", "neuron", "resid"]


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


@dataclass(frozen=True)
class Target:
    """One drawing of components on a panel: the plot, what is under a scene point, where marks go."""

    plot: pg.PlotItem
    component_at: Callable[[QPointF], Component | None]
    marks_for: Callable[[Intervention], list[Point]]


class TargetPanel(Protocol):
    """What a panel with switchable components provides (attention, FFN neurons, residual stream)."""

    interventions: InterventionState | None

    def intervention_targets(self) -> list[Target]: ...
