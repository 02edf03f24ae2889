"""InterventionState: the interventions of this session, each on or off, shared by every panel.

The window owns one; panels read it (``Panel.interventions``) to offer right-click ablation and to
mark switched-off components; the trace controller runs every trace with ``active()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from explorer.core.interventions.spec import Intervention, describe_all


@dataclass(frozen=True)
class Entry:
    intervention: Intervention
    enabled: bool = True


class InterventionState(QObject):
    """Signal ``changed()`` after every edit (add, toggle, remove, clear)."""

    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.entries: list[Entry] = []

    def active(self) -> tuple[Intervention, ...]:
        return tuple(e.intervention for e in self.entries if e.enabled)

    def describe(self) -> list[dict]:
        return describe_all(self.active())

    def find(self, component: tuple) -> int | None:
        return next((i for i, e in enumerate(self.entries) if e.intervention.component == component), None)

    def active_on(self, component: tuple) -> Intervention | None:
        """The intervention on ``component`` if it is on (None if there is none or it is off)."""
        i = self.find(component)
        return None if i is None or not self.entries[i].enabled else self.entries[i].intervention

    def mode_of(self, component: tuple) -> str | None:
        """The mode of the active intervention on ``component`` (None if there is none or it is off)."""
        current = self.active_on(component)
        return None if current is None else current.mode

    def set(self, intervention: Intervention) -> None:
        """Add ``intervention``, replacing one on the same component (switched on)."""
        i = self.find(intervention.component)
        if i is None:
            self.entries.append(Entry(intervention))
        else:
            self.entries[i] = Entry(intervention)
        self.changed.emit()

    def clear_component(self, component: tuple) -> None:
        i = self.find(component)
        if i is not None:
            del self.entries[i]
            self.changed.emit()

    def toggle(self, index: int, enabled: bool | None = None) -> None:
        entry = self.entries[index]
        on = not entry.enabled if enabled is None else enabled
        if on != entry.enabled:
            self.entries[index] = Entry(entry.intervention, on)
            self.changed.emit()

    def remove(self, index: int) -> None:
        del self.entries[index]
        self.changed.emit()

    def clear(self) -> None:
        if self.entries:
            self.entries.clear()
            self.changed.emit()
