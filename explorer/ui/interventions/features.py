"""A learned feature as something a right-click can switch off, clamp or scale.

``FeatureComponent`` is what a Features panel's ``Target.component_at`` answers: ``menu.install``
asks it for its own actions (``actions``), which put a ``core/features/edits.feature_intervention``
in the session's one intervention list (so marks, What changed, DLA and patching see it like a head).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from explorer.core.errors import ExplorerError
from explorer.core.features.edits import feature_intervention
from explorer.ui.interventions.menu import MenuEntry, entry_actions, is_now

if TYPE_CHECKING:
    from explorer.ui.session.interventions import InterventionState

SCALES = (0.5, 2.0)


def feature_key(sae: Any, feature: int) -> tuple:
    """``Intervention.component`` of any intervention on ``feature`` of ``sae`` (whatever its mode)."""
    return ("feature", sae.hook.block, int(feature), None, sae.name)


@dataclass(frozen=True)
class FeatureComponent:
    """Feature ``feature`` of ``sae``; ``clamp_to()`` proposes (or asks for) a clamp value (None: no clamp)."""

    sae: Any
    feature: int
    clamp_to: Callable[[], float | None] | None = None
    on_error: Callable[[str], None] | None = None

    @property
    def name(self) -> str:
        return f"feature {self.feature}"

    @property
    def key(self) -> tuple:
        return feature_key(self.sae, self.feature)

    def set(self, state: InterventionState, mode: str, amount: float | None = None) -> None:
        try:
            state.set(feature_intervention(self.sae, self.feature, mode, amount))
        except ExplorerError as exc:
            if self.on_error is not None:
                self.on_error(str(exc))

    def _clamp(self, state: InterventionState) -> None:
        value = self.clamp_to() if self.clamp_to is not None else None
        if value is not None:
            self.set(state, "clamp", value)

    def actions(self, state: InterventionState, parent: QObject | None) -> list[QAction]:
        """Switch off, scale x0.5 / x2, clamp to…, and Clear when it has an intervention."""
        current = state.active_on(self.key)
        now = partial(is_now, current)

        entries: list[MenuEntry] = [(f"Switch off {self.name}", lambda: self.set(state, "zero"), now("zero"))]
        for s in SCALES:
            entries.append((f"Scale {self.name} \u00d7{s:g}", lambda s=s: self.set(state, "scale", s), now("scale", s)))
        if self.clamp_to is not None:
            entries.append((f"Clamp {self.name} to\u2026", lambda: self._clamp(state), now("clamp")))
        return entry_actions(state, self.key, entries, f"Clear {self.name}", parent)
