"""The Experts panel as a user sees it, on a tiny random mixture-of-experts model (GPT-2's tokenizer): the
routing map's values are core's routing map, a router built to tie says "a small change flips the routing
here", a right-click Switch off adds the intervention (a red cross, the strip) and the retraced routing leaves
the expert out, the selected token's lanes and effects, and the data the exports write."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPoint, QPointF, Qt
from right_click import right_click_menu

from explorer.core.analysis.experts import expert_logit_effects, routing_map, topk_margin
from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel
from explorer.core.model import Transformer
from explorer.core.tokenize.base import gpt2_tokenizer
from explorer.ui.export.data import export_data
from explorer.ui.session.workers import LoadRequest, LoadResult
from explorer.ui.window.docks import dock_of

PROMPT = "The quick brown fox jumps over the lazy dog while the cat watches"
SHAPE = dict(arch="moe", vocab_size=50257, n_ctx=64, d_model=32, n_layers=3, n_heads=4, d_head=8, d_ff=48,
             norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False, mlp_bias=False,
             tie_embeddings=False, moe_layers=(0, 2), n_experts=6, experts_per_token=2, d_expert=16, d_shared=24,
             moe_norm_topk=True)


def moe_model(**overrides) -> LoadedModel:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**{**SHAPE, **overrides})).eval()
    with torch.no_grad():  # random routers (the init leaves them at 0: every expert would tie)
        for layer in model.cfg.moe_layers:
            router = model.blocks[layer].moe.router.weight
            router.copy_(torch.randn(router.shape) * 2.0)
    return LoadedModel(model, gpt2_tokenizer(), "tiny-moe", "test", "moe")


def show(qtbot, window, loaded: LoadedModel, prompt: str = PROMPT):
    window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
    ids = list(loaded.tokenizer.encode(prompt))
    window.session.set_prompt(prompt)
    qtbot.waitUntil(lambda: window.trace is not None and window.trace.config is loaded.config
                    and list(window.trace.token_ids) == ids and window.presenter.is_idle(), timeout=60_000)
    panel = window.panel("experts")
    dock_of(panel).raise_()
    qtbot.waitUntil(lambda: panel.on_screen and panel.trace is window.trace and window.presenter.is_idle(),
                    timeout=30_000)
    return panel


@pytest.fixture
def moe_window(qtbot, make_window):
    window = make_window()
    window.resize(1280, 800)
    return window


def test_the_map_shows_cores_routing_and_follows_the_layer(qtbot, moe_window):
    panel = show(qtbot, moe_window, moe_model())
    trace = moe_window.trace
    assert moe_window.dock("experts").isVisible() and not dock_of(panel).isHidden()
    moe_window.selection.set_layer(2)
    qtbot.waitUntil(lambda: panel.shown_layer() == 2)
    core = routing_map(trace, 2)
    assert panel.columns().tolist() == list(range(6))
    np.testing.assert_allclose(panel.map.matrix, core.weights, atol=1e-7)
    assert "chosen (" in panel.map.cell_text(*np.argwhere(core.chosen)[0])
    assert panel.layer_combo.currentText() == "L2"
    moe_window.selection.set_layer(1)                       # a dense layer: the next MoE layer is shown, and said
    qtbot.waitUntil(lambda: "L1 is dense" in panel.info.text())
    assert panel.shown_layer() == 2
    moe_window.selection.set_layer(0)
    qtbot.waitUntil(lambda: panel.shown_layer() == 0)
    np.testing.assert_allclose(panel.map.matrix, routing_map(trace, 0).weights, atol=1e-7)
    panel.set_values("scores")
    np.testing.assert_allclose(panel.map.matrix, routing_map(trace, 0).probs, atol=1e-7)
    panel.set_order("load")                                 # busiest first: the load bars follow the columns
    load = routing_map(trace, 0).chosen.sum(0)
    assert np.all(np.diff(load[panel.columns()]) <= 0)
    np.testing.assert_allclose(panel.load.values, load[panel.columns()])
    margin = topk_margin(trace, 0).margin
    data, rows, cols = panel.exportables()[1].data()
    np.testing.assert_allclose(data[:, 0], margin)
    assert rows[0].startswith("0:") and cols[0] == "margin"


def test_a_router_built_to_tie_says_a_small_change_flips_the_routing(qtbot, moe_window):
    tied = moe_model(experts_per_token=1)
    with torch.no_grad():
        for layer in (0, 2):
            router = tied.model.blocks[layer].moe.router.weight
            router[1] = router[0]          # experts 0 and 1 always score the same, the others 0: every token ties
            router[2:] = 0.0
    panel = show(qtbot, moe_window, tied)
    assert panel.warning.isVisible()
    assert "A small change flips the routing here" in panel.warning.text()
    assert f"for {moe_window.trace.n_tokens} of {moe_window.trace.n_tokens} tokens" in panel.warning.text()
    assert "within float32 rounding" in panel.strip.text(0)
    clear = show(qtbot, moe_window, moe_model(experts_per_token=1))
    assert "No close calls" in clear.warning.text() and "flips" not in clear.warning.text()


def test_right_click_switch_off_adds_the_intervention_and_the_routing_leaves_the_expert_out(qtbot, moe_window):
    panel = show(qtbot, moe_window, moe_model())
    before = moe_window.trace
    expert = int(np.argmax(routing_map(before, 0).chosen.sum(0)))          # the busiest expert of L0
    col = int(np.flatnonzero(panel.columns() == expert)[0])
    view = panel.map

    def cell_center():
        return view.plot.vb.mapViewToScene(QPointF(col + 0.5, 1.5))

    texts = right_click_menu(qtbot, view, cell_center, choose=f"Switch off expert 0:{expert} (every token)")
    assert any(t.startswith(f"Force expert 0:{expert} into the top 2") for t in texts)
    assert any(t.startswith("At token 1") for t in texts)
    qtbot.waitUntil(lambda: moe_window.trace is not before and moe_window.presenter.is_idle(), timeout=60_000)
    after = moe_window.trace
    assert [iv.label for iv in moe_window.interventions.active()] == [f"expert 0:{expert} off"]
    assert not (after["blocks.0.moe.experts"] == expert).any()              # no token goes to it any more
    assert (before["blocks.0.moe.experts"] == expert).any()
    np.testing.assert_allclose(panel.map.matrix, routing_map(after, 0).weights, atol=1e-7)
    assert not panel.map.matrix[:, col].any()
    assert [b.text() for b in moe_window.intervention_strip.toggles] == [f"expert 0:{expert} off"]
    assert panel.map_marks() == [(col + 0.5, r + 0.5) for r in range(after.n_tokens)]     # the red crosses
    assert panel.load_marks() == [(col + 0.5, panel.load_marks()[0][1])]

def test_the_selected_tokens_lanes_and_effects(qtbot, moe_window, tmp_path):
    panel = show(qtbot, moe_window, moe_model())
    trace = moe_window.trace
    moe_window.selection.set_token(4)
    qtbot.waitUntil(lambda: panel.token_side.result is not None and panel.token_side.result.position == 4,
                    timeout=30_000)
    lanes = panel.token_side.lanes_map.matrix
    for row, layer in enumerate((0, 2)):
        np.testing.assert_allclose(lanes[row], routing_map(trace, layer).weights[4], atol=1e-7)
    target = int(trace.token_ids[5])                                        # the DLA's default: the next token
    effects = expert_logit_effects(trace, target, 4)
    values, labels, cols = panel.token_side.effects_data()
    mine = dict(zip(labels, values[:, 1]))
    for e in effects:
        for expert, value in zip(e.experts, e.effects):
            assert abs(mine[f"L{e.layer} #{expert}"] - value) < 1e-6
        assert abs(mine[f"L{e.layer} shared"] - e.shared) < 1e-6
    assert "the token that follows it in the prompt" in panel.token_side.effects_title.text()
    path = tmp_path / "effects.csv"
    export_data(panel.exportables()[4], path)
    assert path.read_text().splitlines()[0].split(",")[-2:] == ["weight", "direct effect"]


def _click_box(qtbot, diagram, box_id: str) -> None:
    item = diagram.scene.items_by_id[box_id]
    diagram.graphics.ensureVisible(item)
    point = diagram.graphics.mapFromScene(item.sceneBoundingRect().center())
    qtbot.mouseClick(diagram.graphics.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))


def test_the_diagrams_moe_boxes_and_the_tours_experts_step_open_the_experts_panel(qtbot, moe_window):
    panel = show(qtbot, moe_window, moe_model())
    diagram = moe_window.panel("diagram")
    moe_window.raise_panel("diagram")
    moe_window.selection.set_layer(2)
    qtbot.waitUntil(lambda: "L2.moe.shared" in diagram.scene.items_by_id and moe_window.presenter.is_idle(),
                    timeout=30_000)
    titles = {box: diagram.scene.items_by_id[f"L2.moe.{box}"].box.title for box in ("router", "experts", "shared")}
    assert titles == {"router": "Router → top 2 of 6 experts", "experts": "2 experts per token",
                      "shared": "Shared expert"}
    moe_window.selection.set_layer(0)                        # the box's layer is selected by the click
    qtbot.waitUntil(lambda: "L0.moe.router" in diagram.scene.items_by_id)
    moe_window.selection.set_layer(2)
    qtbot.waitUntil(lambda: "L2.moe.router" in diagram.scene.items_by_id)
    _click_box(qtbot, diagram, "L2.moe.router")
    qtbot.waitUntil(lambda: not dock_of(panel).visibleRegion().isEmpty() and panel.shown_layer() == 2)
    assert diagram.visibleRegion().isEmpty()                # the same tab group: the Experts tab is in front
    moe_window.raise_panel("diagram")
    moe_window.selection.set_token(3)
    diagram.open_tour()
    tour = diagram.tour
    qtbot.waitUntil(lambda: not tour.waiting, timeout=30_000)
    tour.go(next(i for i, s in enumerate(tour.steps) if s.panel == "experts"))
    assert tour.open_panel.text() == "Show in Experts" and "experts" in tour.heading.text()
    moe_window.selection.set_layer(0)
    qtbot.mouseClick(tour.open_panel, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dock_of(panel).visibleRegion().isEmpty() and panel.shown_layer() == tour.step.layer)
    assert moe_window.selection.token == 3
    tour.close()


def test_one_tokens_switch_off_force_and_a_scale_by_a_value(qtbot, moe_window):
    panel = show(qtbot, moe_window, moe_model())
    before = moe_window.trace
    token = 1
    expert = int(before["blocks.0.moe.experts"][token][0])                  # its first choice at L0
    col = int(np.flatnonzero(panel.columns() == expert)[0])
    point = lambda: panel.map.plot.vb.mapViewToScene(QPointF(col + 0.5, token + 0.5))  # noqa: E731
    texts = right_click_menu(qtbot, panel.map, point)
    assert f"At token {token} '·quick' only" in texts
    on_map = panel.intervention_targets()[0]
    submenu = next(a for a in on_map.component_at(point()).actions(moe_window.interventions, panel)
                   if a.menu() is not None)
    off = next(a for a in submenu.menu().actions() if a.text().startswith(f"Switch off expert 0:{expert} at token 1"))
    off.trigger()
    qtbot.waitUntil(lambda: moe_window.trace is not before and moe_window.presenter.is_idle(), timeout=60_000)
    after = moe_window.trace
    assert expert not in after["blocks.0.moe.experts"][token]
    others = [p for p in range(after.n_tokens) if p != token]               # L0's other tokens route as before
    np.testing.assert_array_equal(after["blocks.0.moe.experts"][others], before["blocks.0.moe.experts"][others])
    assert panel.map_marks() == [(col + 0.5, token + 0.5)] and panel.load_marks() == []
    moe_window.interventions.clear()
    qtbot.waitUntil(lambda: not moe_window.trace.interventions and moe_window.presenter.is_idle(), timeout=60_000)
    last = int(np.argmin(routing_map(moe_window.trace, 0).chosen.sum(0)))   # an idle expert, forced in everywhere
    panel.factor_value = lambda: 3.0
    component = panel.intervention_targets()[1].component_at(
        panel.load.plot.vb.mapViewToScene(QPointF(float(np.flatnonzero(panel.columns() == last)[0]) + 0.5, 0.5)))
    actions = component.actions(moe_window.interventions, panel)
    assert not any(a.menu() is not None for a in actions)                  # a load bar: every token only
    next(a for a in actions if a.text().startswith(f"Force expert 0:{last}")).trigger()
    qtbot.waitUntil(lambda: bool(moe_window.trace.interventions) and moe_window.presenter.is_idle(), timeout=60_000)
    assert (moe_window.trace["blocks.0.moe.experts"] == last).any(axis=1).all()
    next(a for a in component.actions(moe_window.interventions, panel) if "by\u2026" in a.text()).trigger()
    qtbot.waitUntil(lambda: [iv.label for iv in moe_window.interventions.active()] == [f"expert 0:{last} logit x3"]
                    and moe_window.presenter.is_idle(), timeout=60_000)


def test_the_panel_is_hidden_for_a_dense_model_and_before_any_model(qtbot, make_window, window):
    assert window.dock("experts").isHidden() and not window.dock("experts").toggleViewAction().isEnabled()
    empty = make_window()
    assert empty.dock("experts").isHidden()


def test_the_patching_estimate_is_cores_expert_attribution(qtbot, moe_window):
    from explorer.core.interventions.expert_attribution import expert_attribution

    panel = show(qtbot, moe_window, moe_model())
    panel.content.setCurrentIndex(2)
    patching = panel.patching
    corrupt = "The quick brown cat jumps over the lazy dog while the fox watches"
    tokenizer = moe_window.loaded.tokenizer
    assert len(tokenizer.encode(corrupt)) == moe_window.trace.n_tokens
    qtbot.keyClicks(patching.corrupt_edit, corrupt)
    qtbot.mouseClick(patching.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: patching.result is not None, timeout=60_000)
    clean = [int(i) for i in moe_window.trace.token_ids]
    target = int(np.argmax(moe_window.trace["logits"][-1]))
    core = expert_attribution(moe_window.loaded.model, clean, tokenizer.encode(corrupt), target)
    np.testing.assert_allclose(patching.map.matrix, core.estimates, atol=1e-6)
    assert patching.map.row_labels == ["L0", "L2"] and "clean" in patching.status.text()
    qtbot.waitUntil(patching.run_button.isEnabled)
    qtbot.keyClicks(patching.corrupt_edit, " and more")
    qtbot.mouseClick(patching.run_button, Qt.MouseButton.LeftButton)
    assert "patching needs the same number" in patching.status.text()
