"""An expert of a mixture of experts as something a right-click can switch off, force or scale.

``ExpertComponent`` is what the Experts panel's ``Target.component_at`` answers: ``menu.install`` asks it for
its own actions (``actions``). Each puts one ``core/interventions/spec.Intervention("expert", ...)`` in the
session's one intervention list, so the Interventions strip, the red crosses, What changed, DLA, patching and
generation see it like a head:

* for every token: Switch off (its router logit -inf: each token's experts are drawn from the rest, their
  weights renormalised as the family does), Force into the top-k, Scale its router logit x0.5 / x2 / by a
  value (``ask_factor``, a dialog the panel supplies), and Clear;
* the same for the one token under the mouse, in a submenu "At token P only".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

import numpy as np

from explorer.core.interventions.spec import Intervention
from explorer.ui.interventions.menu import MenuEntry, entry_actions, is_now

if TYPE_CHECKING:
    from explorer.ui.session.interventions import InterventionState

FACTORS = (0.5, 2.0)


def expert_key(layer: int, expert: int, positions: tuple[int, ...] | None = None) -> tuple:
    """``Intervention.component`` of any intervention on expert ``expert`` of ``layer`` at ``positions``."""
    return ("expert", int(layer), int(expert), positions)


@dataclass(frozen=True)
class ExpertComponent:
    """Expert ``expert`` of the mixture of experts in block ``layer``; ``position``/``token``: the token under
    the mouse (None: none, the menu then has no "At token" submenu); ``k``: the model's experts per token;
    ``ask_factor()``: a factor for "Scale by…" (None: cancelled; no entry without it)."""

    layer: int
    expert: int
    k: int
    position: int | None = None
    token: str = ""
    ask_factor: Callable[[], float | None] | None = None

    @property
    def name(self) -> str:
        return f"expert {self.layer}:{self.expert}"

    @property
    def key(self) -> tuple:
        """The every-token component (what ``menu.install``'s Clear looks up)."""
        return expert_key(self.layer, self.expert)

    def intervention(self, mode: str, positions: tuple[int, ...] | None = None,
                     amount: float | None = None) -> Intervention:
        return Intervention("expert", self.layer, self.expert, mode, positions, amount=amount)

    def actions(self, state: InterventionState, parent: QObject | None) -> list[QAction]:
        """Every-token entries, then the "At token P only" submenu, then Clear (for each scope that has one)."""
        actions = self._scope(state, parent, None, " (every token)")
        if self.position is not None:
            where = f"token {self.position}" + (f" {self.token}" if self.token else "")
            owner = parent if isinstance(parent, QWidget) else None
            old = getattr(owner, "_explorer_expert_submenu", None)
            if old is not None:  # the submenu of the menu's last opening (its actions were taken out)
                old.deleteLater()
            menu = QMenu(f"At {where} only", owner)
            for action in self._scope(state, menu, (self.position,), f" at {where}"):
                menu.addAction(action)
            if owner is not None:
                owner._explorer_expert_submenu = menu
            actions.append(menu.menuAction())
        return actions

    def _scope(self, state: InterventionState, parent: QObject | None, positions: tuple[int, ...] | None,
               where: str) -> list[QAction]:
        key = expert_key(self.layer, self.expert, positions)
        current = state.active_on(key)
        now = partial(is_now, current)

        entries: list[MenuEntry] = [
            (f"Switch off {self.name}{where}", lambda: state.set(self.intervention("zero", positions)), now("zero")),
            (f"Force {self.name} into the top {self.k}{where}",
             lambda: state.set(self.intervention("force", positions)), now("force"))]
        for factor in FACTORS:
            entries.append((f"Scale {self.name}'s router logit \u00d7{factor:g}{where}",
                            lambda f=factor: state.set(self.intervention("scale", positions, f)), now("scale", factor)))
        if self.ask_factor is not None:
            entries.append((f"Scale {self.name}'s router logit by\u2026{where}",
                            lambda: self._scale_by(state, positions),
                            now("scale") and current.amount not in FACTORS))
        return entry_actions(state, key, entries, f"Clear {self.name}{where}", parent)

    def _scale_by(self, state: InterventionState, positions: tuple[int, ...] | None) -> None:
        factor = self.ask_factor() if self.ask_factor is not None else None
        if factor is not None:
            state.set(self.intervention("scale", positions, float(factor)))


# --- where an expert intervention is marked (red crosses: ``menu.Marks``) --------------------------------
def map_marks(iv: Intervention, layer: int, columns: np.ndarray, rows: int) -> list[tuple[float, float]]:
    """A tokens x experts map of ``layer`` (its columns the expert ids ``columns``): down the expert's column, or
    at the tokens the intervention names."""
    where = np.flatnonzero(columns == iv.index) if iv.target == "expert" and iv.layer == layer else []
    if not len(where):
        return []
    at = range(rows) if iv.positions is None else [p for p in iv.positions if p < rows]
    return [(float(where[0]) + 0.5, r + 0.5) for r in at]


def bar_marks(iv: Intervention, layer: int, columns: np.ndarray, y: float) -> list[tuple[float, float]]:
    """Bars per expert of ``layer``: one cross at height ``y`` under an expert intervened on for every token."""
    if iv.target != "expert" or iv.positions is not None or iv.layer != layer:
        return []
    where = np.flatnonzero(columns == iv.index)
    return [(float(where[0]) + 0.5, y)] if where.size else []


def grid_marks(iv: Intervention, layers: tuple[int, ...], position: int | None) -> list[tuple[float, float]]:
    """A layers x experts grid (rows ``layers``, column e is expert e) about the token ``position`` (None: about
    every token, so only every-token interventions are marked)."""
    if iv.target != "expert" or iv.layer not in layers:
        return []
    if iv.positions is not None and (position is None or position not in iv.positions):
        return []
    return [(iv.index + 0.5, layers.index(iv.layer) + 0.5)]
