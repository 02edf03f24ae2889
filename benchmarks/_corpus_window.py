"""The window's side of benchmarks/corpus.py: the time to open a neuron's top examples in the FFN neurons panel.

The real main window, offscreen, with the benchmark's model and its corpus run open (``CorpusState.open_now``), the
Neurons panel raised with its "Over the corpus" tab in front. Per neuron, two times, each until the GUI thread has
also processed the events the change posted (the repaint included):

* the evidence alone: ``CorpusEvidence.show_unit`` (the run's top examples and distribution read from SQLite, the
  examples' text laid out, the histogram drawn);
* a neuron switch: ``NeuronsPanel.select_neuron`` (the bars, the prompt's histogram, the vocabulary effect or its
  "computing" line, and the evidence).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")


def window_open_times(loaded, run_path: Path, device: str, count: int = 30) -> tuple[list[float], list[float]]:
    """(evidence alone, whole neuron switch) in milliseconds, for ``count`` random neurons of the run."""
    from PySide6.QtCore import QSettings

    from _window import pump_until
    from explorer.ui.app import ensure_app
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app("light")
    folder = Path(tempfile.mkdtemp(prefix="corpus-window-"))
    window = MainWindow(QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat), device=device)
    window.resize(1280, 800)
    window.show()
    try:
        window.session.use_model(LoadResult(LoadRequest(None, device), loaded, None))
        pump_until(app, lambda: window.trace is not None and window.presenter.is_idle())
        run = window.session.corpus.open_now(run_path)
        window.raise_panel("neurons")
        panel = window.panel("neurons")
        pump_until(app, lambda: panel.trace is window.trace and window.presenter.is_idle())
        evidence = panel.detail.evidence
        panel.detail.tabs.setCurrentWidget(evidence)
        groups = [g for g in run.groups() if g.source == "neurons"]
        layer = groups[-1].layer
        window.selection.set_layer(layer)
        pump_until(app, lambda: panel.layer() == layer and window.presenter.is_idle())
        rng = random.Random(0)
        alone, switch = [], []
        for _ in range(count):
            unit = rng.randrange(groups[-1].units)
            t0 = time.perf_counter()
            evidence.show_unit(layer, unit, 0.0)
            app.processEvents()
            alone.append((time.perf_counter() - t0) * 1000)
            unit = rng.randrange(groups[-1].units)
            t0 = time.perf_counter()
            panel.select_neuron(unit)
            app.processEvents()
            switch.append((time.perf_counter() - t0) * 1000)
            assert evidence.unit == (layer, unit) and evidence.shown
        return alone, switch
    finally:
        window.close()


def line(alone: list[float], switch: list[float]) -> str:
    return (f"open a neuron's top examples in the window (Neurons panel, 'Over the corpus'): evidence alone median "
            f"{statistics.median(alone):.1f} ms, max {max(alone):.1f} ms; whole neuron switch median "
            f"{statistics.median(switch):.1f} ms, max {max(switch):.1f} ms ({len(alone)} neurons; goal <= 50 ms)")
