"""Reopen a saved session in a fresh process and write what every panel shows (tests/ui/test_sessions.py).

    QT_QPA_PLATFORM=offscreen python tests/ui/reopen_session.py SESSION OUT.npz WIDTH HEIGHT

File > Open session… as the user does, then each panel brought to the front in turn; every plot's data (what
Export data as NPY writes) goes into OUT.npz, and a JSON line with the prompt, ids, selection, interventions
and sampling settings (or the line that stopped the reopen) goes to stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QWidget


def panel_arrays(window, wait: Callable[[Callable[[], bool]], None]) -> dict[str, np.ndarray]:
    """Every visible plot's data, each panel brought to the front in turn (``wait(condition)`` until it is drawn)."""
    arrays = {}
    for dock in window.docks:
        if dock.isHidden():
            continue  # a panel that does not apply to this model
        dock.raise_()
        wait(lambda: dock.panel.on_screen and dock.panel.trace is window.trace and window.presenter.is_idle()
             and not dock.panel.computing())
        for exportable in dock.panel.exportables():
            if isinstance(exportable.item, QWidget) and not exportable.item.isVisibleTo(dock.panel):
                continue  # a view of the panel not shown now (the all-heads overview behind one head)
            data = np.asarray(exportable.data()[0])
            if data.size and data.dtype.kind == "f":
                arrays[f"{type(dock.panel).__name__}/{exportable.name}"] = data
    return arrays


def main(session: str, out: str, width: int, height: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from PySide6.QtCore import QEventLoop, QSettings, QTimer

    from explorer.ui.app import ensure_app
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app()
    loop = QEventLoop()
    tick = QTimer()  # wakes the loop below at least this often, whatever the workers do
    tick.start(50)

    def wait(condition: Callable[[], bool]) -> None:
        while not condition():
            loop.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)

    window = MainWindow(QSettings(out + ".ini", QSettings.Format.IniFormat), device="cpu")
    window.resize(width, height)
    window.show()
    done: list[str] = []
    window.session_files.restored.connect(lambda _state: done.append(""))
    window.session_files.failed.connect(done.append)
    window.session_files.open(session, confirm=lambda line: done.append(line) or False)
    wait(lambda: bool(done))
    if done[0]:
        print(json.dumps({"failed": done[0], "loaded": window.loaded is not None}))
        return
    np.savez(out, **panel_arrays(window, wait))
    s, params = window.session, window.generation.current_params()
    print(json.dumps({"failed": "", "prompt": s.prompt, "ids": [int(i) for i in s.trace.token_ids],
                      "selection": [s.selection.layer, s.selection.head, s.selection.token],
                      "interventions": [[e.intervention.label, e.enabled] for e in s.interventions.entries],
                      "temperature": params.temperature, "seed": params.seed}))
    window.close()
    app.processEvents()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
