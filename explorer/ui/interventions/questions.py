"""Questions a right-click on an attention cell asks: "Why does it attend here?" and "What does it move?".

``question_target(plot, cell_at, asker)`` is a :class:`~explorer.ui.interventions.targets.Target` like the
ablation ones (``menu.install`` puts its entries at the top of the plot's right-click menu): ``cell_at``
says which (query, key) is under a scene point, ``asker()`` the session, layer and head the plot shows now
(None: nothing to ask). The entries call ``Session.ask`` with a ``Question``; the panel that answers it
(``ui/panels/qkov.py``) computes and shows the answer. They mark nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import QObject, QPointF
from PySide6.QtGui import QAction

from explorer.ui.interventions.targets import Target
from explorer.ui.session.question import Question

if TYPE_CHECKING:
    from explorer.ui.session.interventions import InterventionState
    from explorer.ui.session.session import Session

WHY = "Why does it attend here?"
WHAT = "What does it move?"


@dataclass(frozen=True)
class Asker:
    """Who asks and about which head: the session and the head the plot shows."""

    session: Session
    layer: int
    head: int


@dataclass(frozen=True)
class CellQuestions:
    """What a right-click on cell (query, key) of head ``layer``.``head`` offers (``menu.component_actions``
    asks it for its ``actions``). ``scored``: the key is visible to the query (a masked cell has no score)."""

    asker: Asker
    query: int
    key: int
    scored: bool = True

    def actions(self, _state: InterventionState | None, parent: QObject | None) -> list[QAction]:
        a = self.asker
        asked = []
        if self.scored:
            asked.append((WHY, Question("qk", a.layer, a.head, self.query, self.key),
                          f"split the score of head {a.layer}.{a.head} from #{self.query} to #{self.key} into the "
                          "parts of the query's and the key's residual streams"))
        # the cell's key goes with it where it has a score: the answer can be asked the other way round
        asked.append((WHAT, Question("ov", a.layer, a.head, self.query, self.key if self.scored else None),
                      f"head {a.layer}.{a.head}'s output at #{self.query}, source by source, and what each source "
                      "token would add to the logits"))
        actions = []
        for text, question, tip in asked:
            action = QAction(text, parent)
            action.setToolTip(tip)
            action.setStatusTip(tip)
            action.triggered.connect(lambda _=False, q=question: a.session.ask(q))
            actions.append(action)
        return actions


def question_target(plot: pg.PlotItem, cell_at: Callable[[QPointF], tuple[int, int] | None],
                    asker: Callable[[], Asker | None],
                    scored: Callable[[int, int], bool] | None = None) -> Target:
    """The questions on ``plot``'s cells: ``cell_at(scene_pos)`` -> (query, key) or None; ``scored(query,
    key)``: whether that cell has a score (default: every cell; the split says so where it has none)."""
    def at(scene_pos: QPointF) -> CellQuestions | None:
        who = asker()
        cell = cell_at(scene_pos) if who is not None else None
        if cell is None:
            return None
        return CellQuestions(who, cell[0], cell[1], True if scored is None else bool(scored(*cell)))

    return Target(plot, at, lambda _iv: [])


def key_under(plot: pg.PlotItem, n: Callable[[], int]) -> Callable[[QPointF], int | None]:
    """The key position under a scene point of a plot whose x axis is the keys (position j spans [j, j+1))."""
    def at(scene_pos: QPointF) -> int | None:
        vb = plot.getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = vb.mapSceneToView(scene_pos).x()
        return int(x) if 0 <= x < n() else None

    return at
