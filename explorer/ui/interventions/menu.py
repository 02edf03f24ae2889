"""Right-click ablation on a plot, and the marks over switched-off components.

``install(panel, plot, locate, position_of)``:

* ``locate(scene_pos)`` returns ``(target, layer, index, positions, name)`` for what lies under
  the mouse (a head tile, a neuron column, a residual cell), or None;
* the plot's right-click menu then starts with "Switch off NAME (zero)", "Mean-ablate NAME" and,
  if NAME is switched off, "Clear NAME", above the export actions;
* ``position_of(intervention)`` gives the plot coordinates where a switched-off component is
  marked with a red cross (an empty list where this plot does not show it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtGui import QAction

from explorer.core.interventions.spec import Intervention

MARK_PEN = pg.mkPen("#ff2a2a", width=2.5)
Locate = Callable[[Any], "tuple[str, int, int | None, tuple[int, ...] | None, str] | None"]


def component_actions(panel: Any, found: tuple, parent: Any) -> list[QAction]:
    target, layer, index, positions, name = found
    state = panel.interventions
    component = (target, layer, index, positions)
    actions = []
    for mode, text in (("zero", f"Switch off {name} (zero)"), ("mean", f"Mean-ablate {name}")):
        action = QAction(text, parent)
        action.setCheckable(True)
        action.setChecked(state.mode_of(component) == mode)
        action.triggered.connect(lambda _=False, m=mode: state.set(Intervention(target, layer, index, m, positions)))
        actions.append(action)
    if state.find(component) is not None:
        clear = QAction(f"Clear {name}", parent)
        clear.triggered.connect(lambda _=False: state.clear_component(component))
        actions.append(clear)
    return actions


class Marks:
    """Red crosses over the active interventions' components on one plot."""

    def __init__(self, plot: pg.PlotItem, position_of: Callable[[Intervention], list[tuple[float, float]]]) -> None:
        self.position_of = position_of
        self.scatter = pg.ScatterPlotItem(symbol="x", size=16, pen=MARK_PEN, brush=pg.mkBrush(255, 42, 42, 200))
        self.scatter.setZValue(40)
        plot.addItem(self.scatter)

    def refresh(self, interventions: tuple[Intervention, ...]) -> None:
        points: list[tuple[float, float]] = []
        for iv in interventions:
            try:
                points += self.position_of(iv)
            except (IndexError, KeyError, ValueError, AttributeError, TypeError):
                continue  # not drawable on this plot now (no trace yet, another layer shown)
        self.scatter.setData(pos=points) if points else self.scatter.clear()

    @property
    def count(self) -> int:
        return len(self.scatter.data)


def install(panel: Any, plot: pg.PlotItem, locate: Locate,
            position_of: Callable[[Intervention], list[tuple[float, float]]]) -> Marks:
    """Put the ablation actions on ``plot``'s right-click menu and return its :class:`Marks`."""
    vb = plot.getViewBox()
    original = vb.raiseContextMenu

    def raise_menu(ev: Any) -> None:
        menu = vb.getMenu(ev)
        for old in getattr(menu, "_explorer_intervention_actions", []):
            menu.removeAction(old)
        menu._explorer_intervention_actions = []
        found = locate(ev.scenePos()) if getattr(panel, "interventions", None) is not None else None
        if found is not None:
            actions = component_actions(panel, found, menu)
            first = menu.actions()[0] if menu.actions() else None
            menu.insertActions(first, actions)
            separator = menu.insertSeparator(first) if first is not None else menu.addSeparator()
            menu._explorer_intervention_actions = [*actions, separator]
        original(ev)

    vb.raiseContextMenu = raise_menu
    marks = Marks(plot, position_of)
    panel._intervention_marks = [*getattr(panel, "_intervention_marks", []), marks]
    return marks
