"""Right-click ablation on a panel's drawings, and the marks over switched-off components.

``install_targets(panel)`` reads the panel's ``intervention_targets()`` (``targets.py``): for each
drawing,

* the plot's right-click menu starts with "Switch off NAME (zero)", "Mean-ablate NAME" and, if NAME
  is switched off, "Clear NAME", above the export actions, for the component under the mouse;
* the components of the active interventions are marked on the plot with a red cross
  (``Target.marks_for``; an empty list where this plot does not show one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from explorer.core.interventions.spec import Intervention
from explorer.ui.interventions.targets import Component, Point, Target, TargetPanel

if TYPE_CHECKING:
    from pyqtgraph.GraphicsScene.mouseEvents import MouseClickEvent

    from explorer.ui.session.interventions import InterventionState

MARK_PEN = pg.mkPen("#ff2a2a", width=2.5)


def component_actions(panel: TargetPanel, found: Component | tuple, parent: QObject | None) -> list[QAction]:
    """The menu entries for ``found`` (a Component, or its ``(target, layer, index, positions, name)``, or
    an object with its own ``actions(state, parent)``: a learned feature, ``features.py``)."""
    if hasattr(found, "actions"):
        return found.actions(panel.interventions, parent) if panel.interventions is not None else []
    component = found if isinstance(found, Component) else Component(*found)
    return state_actions(panel.interventions, component, parent) if panel.interventions is not None else []


# (text, what choosing it does, whether it shows checked: the component's intervention is this one)
MenuEntry = tuple[str, Callable[[], None], bool]


def is_now(current: Intervention | None, mode: str, amount: float | None = None) -> bool:
    """Whether ``current`` (a component's intervention, or None) is in ``mode`` (and with ``amount``, if given):
    whether the menu entry that makes it shows checked."""
    return current is not None and current.mode == mode and (amount is None or current.amount == amount)


def entry_actions(state: InterventionState, key: tuple, entries: list[MenuEntry], clear_text: str,
                  parent: QObject | None) -> list[QAction]:
    """One checkable action per entry, in order, then ``clear_text`` (which takes the intervention on
    ``key`` out) when ``key`` has one, on or off: every component's right-click entries (heads and neurons
    here, experts in ``experts.py``, learned features in ``features.py``)."""
    actions = []
    for text, slot, checked in entries:
        action = QAction(text, parent)
        action.setCheckable(True)
        action.setChecked(checked)
        action.triggered.connect(lambda _=False, f=slot: f())
        actions.append(action)
    if state.find(key) is not None:
        clear = QAction(clear_text, parent)
        clear.triggered.connect(lambda _=False: state.clear_component(key))
        actions.append(clear)
    return actions


def state_actions(state: InterventionState, component: Component, parent: QObject | None) -> list[QAction]:
    name, mode = component.name, state.mode_of(component.key)
    entries: list[MenuEntry] = [
        (f"Switch off {name} (zero)", lambda: state.set(component.intervention("zero")), mode == "zero"),
        (f"Mean-ablate {name}", lambda: state.set(component.intervention("mean")), mode == "mean")]
    return entry_actions(state, component.key, entries, f"Clear {name}", parent)


class Marks:
    """Red crosses over the active interventions' components on one plot."""

    def __init__(self, target: Target) -> None:
        self.position_of = target.marks_for
        self.scatter = pg.ScatterPlotItem(symbol="x", size=16, pen=MARK_PEN, brush=pg.mkBrush(255, 42, 42, 200))
        self.scatter.setZValue(40)
        target.plot.addItem(self.scatter)
        self.points: list[Point] = []

    def refresh(self, interventions: tuple[Intervention, ...]) -> None:
        points: list[Point] = []
        for iv in interventions:
            points += self.position_of(iv)
        if points == self.points:
            return  # the same crosses (every selection switch refreshes them): nothing to redraw
        self.points = points
        self.scatter.setData(pos=points) if points else self.scatter.clear()

    @property
    def count(self) -> int:
        return len(self.scatter.data)


def install(panel: TargetPanel, plot: pg.PlotItem, targets: list[Target]) -> None:
    """Put the ablation actions for what ``targets`` (all drawn on ``plot``) find under the mouse at the top
    of ``plot``'s right-click menu."""
    vb = plot.getViewBox()
    original = vb.raiseContextMenu

    def raise_menu(ev: MouseClickEvent) -> None:
        menu = vb.getMenu(ev)
        for old in getattr(menu, "_explorer_intervention_actions", []):
            menu.removeAction(old)
        menu._explorer_intervention_actions = []
        found = None
        if panel.interventions is not None:
            found = next((c for c in (t.component_at(ev.scenePos()) for t in targets) if c is not None), None)
        if found is not None:
            actions = component_actions(panel, found, menu)
            first = menu.actions()[0] if menu.actions() else None
            menu.insertActions(first, actions)
            separator = menu.insertSeparator(first) if first is not None else menu.addSeparator()
            menu._explorer_intervention_actions = [*actions, separator]
        original(ev)

    vb.raiseContextMenu = raise_menu


def install_targets(panel: TargetPanel) -> list[Marks]:
    """Every drawing the panel declares gets the menu and its marks (kept as ``panel._intervention_marks``,
    one per target, which ``Panel.refresh_marks`` redraws)."""
    targets = panel.intervention_targets()
    plots: dict[int, tuple[pg.PlotItem, list[Target]]] = {}
    for target in targets:
        plots.setdefault(id(target.plot), (target.plot, []))[1].append(target)
    for plot, on_plot in plots.values():
        install(panel, plot, on_plot)
    marks = [Marks(target) for target in targets]
    panel._intervention_marks = marks
    return marks
