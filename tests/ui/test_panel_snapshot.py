"""``prepare`` runs on the worker thread and reads a ``PanelSnapshot`` taken on the GUI thread when
the trace was requested, never the live selection or widgets: changing the selection or an option
after the snapshot does not change what ``prepare`` computes."""

from __future__ import annotations

import dataclasses
import threading

import pytest

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis.neurons import top_neurons
from explorer.ui.panels.attention import AttentionPanel, AttentionSnapshot
from explorer.ui.panels.base import PanelSnapshot
from explorer.ui.panels.neurons import VOCAB_K, NeuronsPanel, NeuronsSnapshot
from explorer.ui.session.selection import Selection

PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat"


@pytest.fixture
def fresh_trace(tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(PROMPT)  # a fresh trace: nothing memoised yet
    assert trace.config.n_layers == 3
    return loaded, trace


def memo_keys(trace) -> set:
    return set(trace._memo)


def run_on_worker(prepare, trace) -> None:
    """Run ``prepare(trace)`` on another thread, as the TraceController's worker does."""
    errors = []
    thread = threading.Thread(target=lambda: _call(prepare, trace, errors))
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and not errors, errors


def _call(prepare, trace, errors) -> None:
    try:
        prepare(trace)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def test_a_snapshot_copies_the_selection_and_is_frozen(qtbot):
    selection = Selection()
    panel = NeuronsPanel(selection)
    qtbot.addWidget(panel)
    selection.set_layer_head(2, 1)
    selection.set_token(4)
    panel.set_top_k(16)
    snapshot = panel.snapshot()
    assert isinstance(snapshot, NeuronsSnapshot) and isinstance(snapshot, PanelSnapshot)
    assert (snapshot.layer, snapshot.head, snapshot.token, snapshot.top_k) == (2, 1, 4, 16)
    selection.set_layer(0)
    panel.set_top_k(32)
    assert (snapshot.layer, snapshot.top_k) == (2, 16)  # a copy, not a view of the live state
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.layer = 0


def test_neurons_prepare_computes_for_the_snapshot_not_the_current_selection(qtbot, fresh_trace):
    loaded, trace = fresh_trace
    selection = Selection()
    panel = NeuronsPanel(selection)
    qtbot.addWidget(panel)
    panel.set_tokenizer(loaded.tokenizer)
    selection.set_layer(1)
    selection.set_token(3)
    panel.set_top_k(16)
    snapshot = panel.snapshot()  # taken here, on the GUI thread (the presenter takes it with each trace request)
    selection.set_layer(2)  # the user moves on before the worker runs
    selection.set_token(7)
    panel.set_top_k(32)
    run_on_worker(lambda t: panel.prepare(t, snapshot), trace)
    keys = memo_keys(trace)
    assert ("neurons.layer", 1) in keys and ("neurons.layer", 2) not in keys
    assert ("neurons.top", 1, 16) in keys and not any(k[:1] == ("neurons.top",) and k != ("neurons.top", 1, 16)
                                                      for k in keys)
    neuron = int(top_neurons(trace["blocks.1.mlp.post"], 3, 1)[0][0])  # the snapshot token's top neuron
    assert ("neurons.vocab", 1, neuron, VOCAB_K, loaded.tokenizer.vocab_size) in keys
    assert panel.needed_keys(trace, NeuronsSnapshot(layer=1)) == ["blocks.1.mlp.post"]
    assert panel.needed_keys(trace, panel.snapshot()) == ["blocks.2.mlp.post"]


def test_attention_prepare_follows_the_snapshots_statistics_option(qtbot, fresh_trace):
    trace = fresh_trace[1]
    panel = AttentionPanel(Selection())
    qtbot.addWidget(panel)
    panel.show_statistics(True)
    panel.set_statistic("entropy")
    snapshot = panel.snapshot()
    assert isinstance(snapshot, AttentionSnapshot) and snapshot.statistics_on and snapshot.statistic == "entropy"
    panel.show_statistics(False)  # unticked after the request: the worker still computes what was asked
    panel.prepare(trace, snapshot)
    assert ("attention.statistic", "entropy") in memo_keys(trace)

    other = fresh_trace[0].trace(PROMPT + " again")
    off = panel.snapshot()
    panel.show_statistics(True)  # ticked after the request: not computed on the worker
    panel.prepare(other, off)
    assert not any(k[0] == "attention.statistic" for k in memo_keys(other))
    assert any(k[0] == "attention.mosaic" for k in memo_keys(other))


def test_the_window_binds_each_panels_snapshot_when_the_trace_is_requested(qtbot, window):
    neurons = next(p for p in window.panels if isinstance(p, NeuronsPanel))
    next(d for d in window.docks if d.panel is neurons).raise_()  # its tab in front: only panels on screen prepare
    qtbot.waitUntil(lambda: neurons.on_screen)
    window.selection.set_layer(1)
    requests = window.presenter.requests()  # what TraceController.request hands the worker
    assert any(r.panel == "neurons" and r.snapshot.layer == 1 for r in requests)
    window.selection.set_layer(0)
    trace = window.loaded.trace("A different prompt for a fresh trace")
    for request in requests:
        run_on_worker(request, trace)
    keys = memo_keys(trace)
    assert ("neurons.layer", 1) in keys and ("neurons.layer", 0) not in keys
