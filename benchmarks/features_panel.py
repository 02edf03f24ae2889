"""The Features panel in the window (``benchmarks/features.py --panel``): see that module's docstring."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402
import explorer.ui  # noqa: E402,F401
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from _window import Heartbeat, complete, prompt_of, pump_until, side_by_side  # noqa: E402

FIRST_MS = 100.0


def edits(app, window, panel, loaded, n_tokens: int, runs: int, beat: Heartbeat) -> dict[str, float]:
    """Medians (first two runs dropped) over ``runs`` edits of a ``n_tokens``-token prompt."""
    marks: dict[str, float] = {}
    own: list[float] = []
    show_whole = panel._show_whole

    def timed(timing) -> None:  # the presenter's timing signal: the panel's set_trace of this edit's trace
        if timing.what == "draw" and timing.name == "features" and results and panel.trace is results[-1].trace:
            own.append(timing.ms)
            marks.setdefault("first", timing.end)

    def timed_whole(result):
        show_whole(result)
        if result.acts is not None and results and panel.trace is results[-1].trace:
            marks.setdefault("whole", time.perf_counter())

    def ready(frame):  # the trace reaches the GUI thread: before the window draws any panel with it
        results.append(frame)
        marks.setdefault("ready", time.perf_counter())

    panel._show_whole = timed_whole
    results: list = []
    window.presenter.shown.connect(ready)
    window.presenter.timed.connect(timed)
    rows: dict[str, list[float]] = {k: [] for k in ("first", "whole", "complete", "forward", "stall", "own")}
    for run in range(runs + 2):
        marks.clear()
        results.clear()
        own.clear()
        t0 = time.perf_counter()
        window.controller.request(prompt_of(loaded, n_tokens, run + 1))
        pump_until(app, lambda: bool(results) and window.trace is results[-1].trace and "whole" in marks
                   and complete(window))
        t1 = time.perf_counter()
        ready = t0 + results[-1].worker_seconds  # the worker's end (request to the trace handed over)
        rows["first"].append((marks["first"] - ready) * 1000)
        rows["whole"].append((marks["whole"] - ready) * 1000)
        rows["complete"].append((t1 - t0) * 1000)
        rows["forward"].append(results[-1].trace.meta.forward_seconds * 1000)
        rows["stall"].append(beat.max_gap_ms(t0, t1))
        rows["own"].append(sum(own))
    del panel._show_whole
    window.presenter.shown.disconnect(ready)
    window.presenter.timed.disconnect(timed)
    assert window.trace.n_tokens == n_tokens
    med = {k: statistics.median(v[2:]) for k, v in rows.items()}
    med["stall"] = max(rows["stall"][2:])
    return med


def report(title: str, med: dict[str, float]) -> None:
    fwd, done = med["forward"], med["complete"]
    print(f"  {title}")
    print(f"    trace -> selected token's first features drawn: {med['first']:7.1f} ms  (target {FIRST_MS:.0f} ms: "
          f"{'ok' if med['first'] <= FIRST_MS else 'MISSED'}; the panel's own drawing {med['own']:.1f} ms)")
    print(f"    trace -> whole tokens x features view drawn:    {med['whole']:7.1f} ms  (progressive)")
    print(f"    edit -> every visible panel complete:           {done:7.1f} ms  (target 1.5 x forward + 150 = "
          f"{1.5 * fwd + 150:.0f} ms: {'ok' if done <= 1.5 * fwd + 150 else 'MISSED'}; forward {fwd:.1f} ms)")
    print(f"    longest GUI-thread stall during an edit:        {med['stall']:7.1f} ms")


def panel_section(loaded, sae_dir: str, n_tokens: int, runs: int) -> None:
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        window = MainWindow(settings=QSettings(str(Path(tmp) / "b.ini"), QSettings.Format.IniFormat), device="cpu")
        window.resize(1600, 1000)
        window.show()
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        pump_until(app, lambda: window.trace is not None and complete(window))
        window.session.features.open_now(sae_dir)
        panel = window.panel("features")
        pump_until(app, lambda: complete(window) and panel.on_screen)
        assert panel.sae is not None
        beat = Heartbeat()
        print(f"\nFeatures panel in the window ({n_tokens} tokens, {panel.sae.d_sae:,}-feature SAE, {runs} runs, "
              f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f})")
        report("the default layout, the Features tab raised:", edits(app, window, panel, loaded, n_tokens, runs, beat))
        side_by_side(window)
        pump_until(app, lambda: complete(window))
        report("every panel on screen (docks side by side):", edits(app, window, panel, loaded, n_tokens, runs, beat))
        print(f"  load average after: {os.getloadavg()[0]:.1f}")
        window.close()
        app.processEvents()
