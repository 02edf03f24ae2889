"""Prepare returns what is drawn: a panel's ``prepare`` makes a frozen view of the trace on a
worker, and the window hands that very view to ``draw`` (the panel does not prepare it again).
Every panel of the registry does so."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from explorer.ui.panels import panel_classes
from explorer.ui.panels.base import PanelView
from explorer.ui.panels.embeddings import EmbeddingsPanel, EmbeddingsView
from explorer.ui.session.selection import Selection


def test_the_embeddings_view_is_frozen_and_is_what_the_panel_draws(qtbot, tiny_loaded):
    trace = tiny_loaded.trace("The cat sat on the mat.")
    panel = EmbeddingsPanel(Selection())
    qtbot.addWidget(panel)
    view = panel.prepare(trace, panel.snapshot())
    assert isinstance(view, EmbeddingsView) and isinstance(view, PanelView) and view.trace is trace
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.levels = (0.0, 1.0)
    panel.set_trace(trace, view)
    assert panel._view is view
    assert panel.cosine_map.matrix.shape == (trace.n_tokens, trace.n_tokens)
    other = tiny_loaded.trace("Another prompt")
    panel.set_trace(other, view)  # a view of another trace is not drawn: the panel prepares its own
    assert panel._view is not view and panel._view.trace is other


def test_the_window_draws_the_view_prepared_on_the_worker(qtbot, window, monkeypatch):
    panel = next(p for p in window.panels if isinstance(p, EmbeddingsPanel))
    next(d for d in window.docks if d.panel is panel).raise_()
    qtbot.waitUntil(lambda: panel.on_screen and panel.trace is window.trace, timeout=30_000)
    threads = []
    original = EmbeddingsPanel.prepare

    def recorded(self, trace, snapshot):
        view = original(self, trace, snapshot)
        threads.append((threading.get_ident(), view))
        return view

    monkeypatch.setattr(EmbeddingsPanel, "prepare", recorded)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("A prompt prepared on a worker thread")
    gui = threading.get_ident()
    assert threads and all(ident != gui for ident, _ in threads)  # never prepared on the GUI thread
    assert panel._view is threads[-1][1] and panel._view.trace is window.trace


@pytest.mark.parametrize("cls", panel_classes(), ids=lambda cls: cls.__name__)
def test_every_panel_prepares_a_frozen_view_of_the_trace_and_draws_that_view(qtbot, tiny_loaded, cls, monkeypatch):
    trace = tiny_loaded.trace("The cat sat on the mat. The cat sat")
    panel = cls(Selection())
    qtbot.addWidget(panel)
    panel.set_tokenizer(tiny_loaded.tokenizer)
    view = panel.prepare(trace, panel.snapshot())
    assert isinstance(view, PanelView) and type(view) is not PanelView and view.trace is trace
    assert dataclasses.is_dataclass(view) and type(view).__dataclass_params__.frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.trace = None
    drawn = []
    original = cls.draw
    monkeypatch.setattr(cls, "draw", lambda self, v: (drawn.append(v), original(self, v))[1])
    monkeypatch.setattr(cls, "prepare", lambda *a, **k: pytest.fail("a view for this trace was given"))
    panel.set_trace(trace, view)
    assert drawn == [view] and panel.trace is trace
