"""A selection switch in the Model diagram moves the drawn block, it does not rebuild it: a layer
switch keeps the scene and its box items (object identity), relabels them, and every summary is the
one computed from scratch for the new selection."""

from __future__ import annotations

import pytest
import torch

from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer
from explorer.ui.panels.base import clamp_token
from explorer.ui.panels.diagram import DiagramPanel
from explorer.ui.panels.diagram.panel import COMPUTING, summaries_of
from explorer.ui.panels.diagram.scene import SPARK_H, SPARK_W, DiagramScene, sparkline
from explorer.ui.session.session import Session


@pytest.fixture(scope="module")
def four_layers():
    torch.manual_seed(3)
    cfg = ModelConfig(vocab_size=50257, n_ctx=64, d_model=32, n_layers=4, n_heads=2, d_head=16, d_ff=64)
    return LoadedModel(Transformer(cfg).eval(), gpt2_tokenizer(), "four layers", "test", "gpt2")


@pytest.fixture
def shown(qtbot, four_layers):
    trace = four_layers.trace("One two three four five six seven eight")
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(four_layers.tokenizer)
    panel.resize(1280, 800)
    panel.show()
    panel.set_trace(trace)
    yield panel, session, trace
    session.shutdown()


def _fresh(panel, trace, session):
    s = session.selection
    return summaries_of(trace, s.layer, s.head, s.token, panel.tokenizer).summaries


def test_a_layer_switch_between_middle_blocks_keeps_the_scene_and_its_box_items(qtbot, shown):
    panel, session, trace = shown
    session.selection.set_layer(1)
    qtbot.waitUntil(lambda: panel.view.layer == 1)
    scene, items = panel.scene, list(panel.scene.block_items)
    head_items = {k: v for k, v in scene.items_by_id.items() if not k.startswith("L")}
    session.selection.set_layer(2)
    qtbot.waitUntil(lambda: panel.view.layer == 2)
    assert panel.scene is scene and panel.scene.block_items == items
    assert all(a is b for a, b in zip(panel.scene.block_items, items))
    assert {k: v for k, v in scene.items_by_id.items() if not k.startswith("L")} == head_items
    assert {i.box.id for i in items} == {k for k in scene.items_by_id if k.startswith("L")}
    assert all(i.box.layer == 2 and i.box.id.startswith("L2.") for i in items)
    assert scene.block_label.text() == "block 2 of 4"
    assert [s.title_item.text() for s in scene.strips] == ["blocks 0–1 (collapsed)", "block 3 (collapsed)"]
    assert [(s.first, s.last) for s in scene.strips] == [(0, 1), (3, 3)]
    built = DiagramScene()
    built.build(panel.view.diagram, 2)  # the moved scene draws what a scene built for block 2 draws
    assert [a.path() for a in scene.arrows] == [a.path() for a in built.arrows]
    assert {k: (i.box, i.pos(), i.toolTip()) for k, i in scene.items_by_id.items()} == \
        {k: (i.box, i.pos(), i.toolTip()) for k, i in built.items_by_id.items()}
    with qtbot.waitSignal(session.panel_requested):  # a moved box opens its new layer
        scene.items_by_id["L2.ffn.in"].on_click()
    assert session.selection.layer == 2
    scene.strips[1].on_click()  # the strip after block 2 selects block 3
    qtbot.waitUntil(lambda: panel.view.layer == 3)
    assert panel.scene is not scene  # the last block has no strip after it: a layout of its own


def test_switches_reuse_what_they_leave_unchanged_and_every_summary_is_exact(qtbot, shown):
    panel, session, trace = shown
    sel = session.selection
    for change in (lambda: None, lambda: sel.set_layer(1), lambda: sel.set_head(1), lambda: sel.set_token(3),
                   lambda: sel.set_layer(2), lambda: sel.set_head(0), lambda: sel.set_token(5),
                   lambda: sel.set_layer(0), lambda: sel.set_layer(3)):
        change()
        qtbot.waitUntil(lambda: (panel.view.layer, panel.view.head, panel.view.token)
                        == (sel.layer, sel.head, clamp_token(sel.token, trace.n_tokens)))
        fresh = _fresh(panel, trace, session)
        assert panel.view.summaries == fresh
        for box_id, item in panel.scene.items_by_id.items():
            assert item.summary == fresh[box_id]
            assert item.summary_item.text() == fresh[box_id].text
            path, point = sparkline(fresh[box_id].series, fresh[box_id].mark, SPARK_W, SPARK_H)
            assert item.spark.path() == path  # the drawn line and its dot are the new selection's
            assert item.dot.isVisible() == (point is not None) and (point is None or item.dot.pos() == point)


def test_a_panel_off_screen_draws_a_selection_change_when_it_is_shown(qtbot, shown, counter):
    panel, session, trace = shown
    sel, calls = session.selection, counter.calls(panel, "selection_changed")
    panel.set_on_screen(False)  # behind another tab
    sel.set_token(2)
    sel.set_layer(1)
    sel.set_token(4)
    assert calls == [] and (panel.view.layer, panel.view.token) == (0, trace.n_tokens - 1)
    panel.set_on_screen(True)
    assert calls == [("layer",), ("token",)]  # once each, whatever happened meanwhile
    qtbot.waitUntil(lambda: (panel.view.layer, panel.view.token) == (1, 4))
    assert panel.view.summaries == _fresh(panel, trace, session)


def test_a_token_switch_with_a_large_vocabulary_shows_computing_then_the_fresh_summaries(qtbot, shown, monkeypatch):
    panel, session, trace = shown
    monkeypatch.setattr("explorer.ui.panels.diagram.panel.VOCAB_NOW", 0)  # as for a 128k vocabulary
    qtbot.waitUntil(lambda: panel.view is not None and not panel.computing())
    item = panel.scene.items_by_id["unembed"]
    for t, new in ((2, True), (5, True), (2, False)):  # new positions (un-embedding on a worker), then one kept
        session.selection.set_token(t)
        assert panel.view.token == t  # drawn at once: the other boxes exact, the un-embedding...
        fresh = _fresh(panel, trace, session)
        if new:  # ...computing (never another token's numbers under this one)...
            assert item.summary == COMPUTING and panel.view.pending == ("unembed",)
            assert {k: v for k, v in panel.view.summaries.items() if k != "unembed"} == \
                {k: v for k, v in fresh.items() if k != "unembed"}
        else:  # ...or kept with the trace
            assert item.summary == fresh["unembed"] and not panel.view.pending
        qtbot.waitUntil(lambda: not panel.view.pending and not panel.computing())
        assert panel.view.token == t and panel.view.summaries == fresh and item.summary == fresh["unembed"]
        assert item.summary_item.text() == fresh["unembed"].text
    session.selection.set_layer(1)  # a layer switch at the same token keeps the un-embedding's summary
    qtbot.waitUntil(lambda: panel.view.layer == 1 and not panel.computing())
    assert panel.view.summaries == _fresh(panel, trace, session) and not panel.view.pending


def test_a_switch_to_a_layer_computed_ahead_computes_nothing_on_the_gui_thread(qtbot, shown, monkeypatch):
    import threading

    import explorer.ui.panels.diagram.panel as diagram_panel

    panel, session, trace = shown
    sel, gui, calls = session.selection, threading.get_ident(), []
    original = diagram_panel.box_summary

    def counted(*args, **kwargs):
        calls.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(diagram_panel, "box_summary", counted)
    for change, layer in ((lambda: sel.set_layer(1), 2), (lambda: sel.set_head(1), 2), (lambda: sel.set_token(3), 0),
                          (lambda: sel.set_token(5), 2)):
        change()
        qtbot.waitUntil(lambda: not panel.computing())  # the neighbouring layers computed ahead (on the lane)
        ahead = panel._ahead[sel.layer + 1]
        assert (ahead.head, ahead.token) == (sel.head, clamp_token(sel.token, trace.n_tokens))
        calls.clear()
        sel.set_layer(layer)
        qtbot.waitUntil(lambda: panel.view.layer == layer)
        assert gui not in calls  # the switch only drew
        assert panel.view.summaries == _fresh(panel, trace, session)
        for box_id, item in panel.scene.items_by_id.items():
            assert item.summary == panel.view.summaries[box_id]
        qtbot.waitUntil(lambda: not panel.computing())
        sel.set_layer(1)
        qtbot.waitUntil(lambda: panel.view.layer == 1 and not panel.computing())
