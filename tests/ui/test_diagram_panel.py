"""The Model diagram panel: its boxes show the trace's numbers for the selected token, follow the selection,
and a click selects the box's layer, head and token and shows its panel."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from explorer.core.diagram import build_diagram
from explorer.ui.panels.diagram import DiagramPanel
from explorer.ui.session.session import Session

PROMPT = "The quick brown fox jumps over the lazy dog"


def _click(qtbot, panel, box_id):
    item = panel.scene.items_by_id[box_id]
    panel.graphics.ensureVisible(item)
    point = panel.graphics.mapFromScene(item.sceneBoundingRect().center())
    qtbot.mouseClick(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))


@pytest.fixture
def shown(qtbot, tiny_loaded):
    trace = tiny_loaded.trace(PROMPT)
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_tokenizer(tiny_loaded.tokenizer)
    panel.resize(1280, 800)
    panel.show()
    panel.set_trace(trace)
    yield panel, session, trace
    session.shutdown()


def test_the_panel_draws_every_box_of_the_head_the_selected_block_and_the_tail(shown):
    panel, _session, trace = shown
    diagram = build_diagram(trace.config, trace.n_tokens)
    drawn = set(panel.scene.items_by_id)
    assert drawn == {b.id for b in diagram.head() + diagram.block(0) + diagram.tail()}
    assert len(panel.scene.strips) == 1 and panel.scene.strips[0].first == 1  # block 1 collapsed
    item = panel.scene.items_by_id["L0.ffn.in"]
    assert item.title_item.text() == "FFN neurons" and f"{trace.n_tokens} × 64" in item.line_items[0].text()


def test_summaries_follow_the_selected_token_layer_and_head(qtbot, shown):
    panel, session, trace = shown
    selection = session.selection
    t = trace.n_tokens - 1
    norm = float(np.linalg.norm(trace["blocks.0.resid_mid"][t]))
    assert panel.scene.items_by_id["L0.add1"].summary_item.text() == f"‖x‖ = {norm:.3g}"
    selection.set_token(2)
    selection.set_layer(1)
    selection.set_head(1)
    qtbot.waitUntil(lambda: panel.view.layer == 1 and panel.view.token == 2 and panel.view.head == 1)
    assert "L1.attn.scores" in panel.scene.items_by_id and "L0.attn.scores" not in panel.scene.items_by_id
    row = trace.head(1, 1, "pattern")[2]
    assert panel.view.summaries["L1.attn.scores"].value == pytest.approx(float(row.max()))
    assert panel.strip.layer == 1


def test_clicking_a_box_selects_its_layer_head_and_token_and_asks_for_its_panel(qtbot, shown):
    panel, session, _trace = shown
    session.selection.set_head(1)
    session.selection.set_token(3)
    session.selection.set_layer(1)
    qtbot.waitUntil(lambda: panel.view.layer == 1 and "L1.attn.scores" in panel.scene.items_by_id)
    with qtbot.waitSignal(session.panel_requested) as shown_panel:
        _click(qtbot, panel, "L1.attn.scores")
    assert shown_panel.args == ["attention"]
    assert (session.selection.layer, session.selection.head, session.selection.token) == (1, 1, 3)
    with qtbot.waitSignal(session.panel_requested) as shown_panel:
        _click(qtbot, panel, "L1.ffn.in")
    assert shown_panel.args == ["neurons"] and session.selection.layer == 1
    with qtbot.waitSignal(session.panel_requested) as shown_panel:  # a collapsed strip selects its block
        panel.scene.strips[0].on_click()
        _click(qtbot, panel, "L0.attn.qkv")
    assert shown_panel.args == ["attention"] and session.selection.layer == 0
    with qtbot.waitSignal(session.panel_requested) as shown_panel:
        _click(qtbot, panel, "embed")
    assert shown_panel.args == ["embeddings"] and session.selection.token == 3


def test_in_the_window_a_click_on_a_box_raises_that_panels_dock(qtbot, window):
    panels = {d.panel_id: d.panel for d in window.docks}
    diagram = panels["diagram"]
    from explorer.ui.window.docks import dock_of

    dock_of(diagram).show()
    dock_of(diagram).raise_()
    qtbot.waitUntil(lambda: diagram.view is not None and "L0.ffn.in" in diagram.scene.items_by_id)
    _click(qtbot, diagram, "L0.ffn.in")
    neurons = dock_of(panels["neurons"])
    qtbot.waitUntil(lambda: not neurons.visibleRegion().isEmpty())
    assert diagram.visibleRegion().isEmpty()  # the same tab group: the neurons' tab is in front now


def test_a_view_prepared_before_the_selection_moved_is_brought_up_to_date(qtbot, shown):
    panel, session, trace = shown
    stale = panel.prepare(trace, panel.snapshot())  # taken at layer 0, as a worker would
    session.selection.set_layer(1)
    panel.set_trace(trace, stale)
    qtbot.waitUntil(lambda: panel.view.layer == 1)
    assert "L1.ffn.in" in panel.scene.items_by_id


def test_help_start_here_shows_the_diagram(qtbot, window):
    from explorer.ui.window.docks import dock_of

    panels = {d.panel_id: d.panel for d in window.docks}
    dock_of(panels["tokenization"]).raise_()
    qtbot.waitUntil(lambda: panels["diagram"].visibleRegion().isEmpty())
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    start = next(a for a in help_menu.actions() if a.text() == "&Start here: the model diagram")
    start.trigger()
    qtbot.waitUntil(lambda: not panels["diagram"].visibleRegion().isEmpty())


def test_the_tour_on_a_trace_without_its_values_says_so_in_one_line(qtbot, tiny_loaded):
    from explorer.core.trace import Trace

    full = tiny_loaded.trace(PROMPT)
    keep = {k: full[k] for k in full.stored_keys() if k not in ("logits", "resid_final") and ".mlp." not in k}
    bare = Trace(full.token_ids, full.tokens, full.config, keep)  # as read from a file: no model
    session = Session()
    panel = DiagramPanel(session.selection)
    panel.attach(session)
    qtbot.addWidget(panel)
    panel.set_trace(bare)
    panel.open_tour()
    qtbot.waitUntil(lambda: panel.caption.text().startswith("The tour cannot start on this trace: "))
    assert not panel.tour.isVisible()
    assert "\n" not in panel.caption.text()
    session.shutdown()


def test_a_new_prompt_frees_the_scenes_of_the_old_one(qtbot, shown, tiny_loaded):
    from PySide6.QtWidgets import QGraphicsScene

    panel, session, _trace = shown
    session.selection.set_layer(1)
    qtbot.waitUntil(lambda: panel.view.layer == 1)
    assert len(panel._scenes) == 2
    panel.set_trace(tiny_loaded.trace("A different prompt"))
    qtbot.waitUntil(lambda: len(panel.findChildren(QGraphicsScene)) == 1)
    assert panel.findChildren(QGraphicsScene) == [panel.scene] and list(panel._scenes.values()) == [panel.scene]
    assert panel.scene.layer == 1
