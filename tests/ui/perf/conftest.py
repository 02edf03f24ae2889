"""Performance policies, in one marked place (``-m perf``): what the window must not do on a switch or an
edit (draw two panels in one event, re-lay a panel out, recompute what it shows already), counted, never
timed. A refactor that changes these tests changes a policy, not a value the user reads.

``counter`` is the one way these tests count: calls of a method (``calls``), events a widget receives
(``events``: a LayoutRequest, a Paint), and the presenter's panels drawn, each with the number of turns of
the event loop before it (``draws``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QObject, QTimer

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.perf)


class _Events(QObject):
    def __init__(self, types: tuple, seen: list) -> None:
        super().__init__()
        self.types, self.seen = types, seen

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() in self.types:
            self.seen.append(event.type())
        return False


class Counter:
    def __init__(self, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.filters: list[tuple[QObject, _Events]] = []
        self.timers: list[QTimer] = []
        self.connections: list = []

    def calls(self, obj, name: str, through: bool = True) -> list:
        """Each call of ``obj.name`` (its arguments) from now on; ``through``: the real method still runs."""
        seen: list = []
        original = getattr(obj, name)

        def counted(*args, **kwargs):
            seen.append(args)
            return original(*args, **kwargs) if through else None

        self.monkeypatch.setattr(obj, name, counted)
        return seen

    def events(self, obj: QObject, *types: QEvent.Type) -> list:
        """Each event of ``types`` ``obj`` receives from now on."""
        seen: list = []
        watcher = _Events(types, seen)
        obj.installEventFilter(watcher)
        self.filters.append((obj, watcher))
        return seen

    def draws(self, window) -> list[tuple[str, int, object]]:
        """(panel id, turns of the event loop so far, the trace it drew) for each panel the presenter draws
        from now on (its timing signal); a zero-interval timer counts the turns."""
        beats, seen = [0], []
        timer = QTimer()
        timer.setInterval(0)
        timer.timeout.connect(lambda: beats.__setitem__(0, beats[0] + 1))
        timer.start()
        self.timers.append(timer)

        def drawn(timing) -> None:
            panel = window.presenter.panel(timing.name) if timing.what == "draw" else None
            if panel is not None:  # a panel (not the comparison view)
                seen.append((timing.name, beats[0], panel.trace))

        window.presenter.timed.connect(drawn)
        self.connections.append((window.presenter.timed, drawn))
        return seen

    def close(self) -> None:
        for timer in self.timers:
            timer.stop()
        for signal, slot in self.connections:
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        for obj, watcher in self.filters:
            try:
                obj.removeEventFilter(watcher)
            except RuntimeError:  # the widget went with its window
                pass


@pytest.fixture
def counter(monkeypatch):
    counting = Counter(monkeypatch)
    yield counting
    counting.close()
