"""A 4096-token prompt on a tiny model: tracing and drawing the attention panel never allocate a
[heads, n, n] (or [layers, heads, n, n]) array, not even one head's [n, n]; the view shows a pooled
overview, exact tiles when zoomed in, and exact query rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis import attention_tiles as tiles
from explorer.core.config import ModelConfig
from explorer.core.model import Transformer
from explorer.core.trace import capture
from explorer.ui.panels.attention import AttentionPanel
from explorer.ui.panels.attention.long_detail import OVERVIEW_PIXELS, TILE_MAX
from explorer.ui.session.selection import Selection

N = 4096
CFG = dict(vocab_size=64, n_ctx=N, d_model=32, n_layers=2, n_heads=4, d_head=8, d_ff=64)
ONE_HEAD = N * N * 4  # bytes of one head's float32 [n, n]; heads x n^2 is 4x this, layers x heads x n^2 8x


def largest_torch_allocation(prof) -> tuple[int, str]:
    """The largest memory one torch operation allocated (bytes) and its name."""
    return max(((e.cpu_memory_usage, e.name) for e in prof.events() if e.cpu_memory_usage), default=(0, ""))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(**CFG)).eval()


def traced_and_drawn(qtbot, model, n: int):
    """Trace n tokens as the window does and draw the attention panel: the head, its scores, a zoomed-in
    tile and a query row. Returns (trace, panel)."""
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 64, n)]
    trace, _ = capture(model, ids, [f"t{i}" for i in ids])  # the window's capture (no scores, no patterns)
    selection = Selection()
    panel = AttentionPanel(selection)
    qtbot.addWidget(panel)
    selection.clamp(2, 4, n)
    selection.set_layer_head(1, 2)
    trace.materialize(panel.needed_keys(trace, panel.snapshot()))
    panel.set_trace(trace, panel.prepare(trace, panel.snapshot()))  # prepare: what the worker does
    panel.resize(1000, 700)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: panel.long_detail.trace is trace and not panel.computing(), timeout=60000)
    panel.set_kind("scores")
    qtbot.waitUntil(lambda: panel.long_detail.kind == "scores" and not panel.computing(), timeout=60000)
    panel.long_detail.plot.setRange(xRange=(n - 2100, n - 1900), yRange=(n - 2096, n - 1896), padding=0)
    panel.long_detail.refresh_tile()
    selection.set_token(n - 1996)
    return trace, panel


def test_tracing_and_drawing_4096_tokens_never_allocates_n_squared(qtbot, model):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        traced_and_drawn(qtbot, model, 1100)  # imports and first-time set-ups happen outside the probe
    tracemalloc.start()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            trace, panel = traced_and_drawn(qtbot, model, N)
        _, numpy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert trace.n_tokens == N and panel.geometry is not None  # the all-heads mosaic was drawn too
    assert "blocks.1.attn.pattern" not in trace.stored_keys()
    # the largest (16 MiB) is the forward pass's own [n, n] boolean causal mask (aten::triu): n^2 bytes, no floats
    assert largest_torch_allocation(prof)[0] < ONE_HEAD / 2, largest_torch_allocation(prof)
    assert numpy_peak < ONE_HEAD / 4, numpy_peak  # measured 10.5 MB, 4 MB of it the trace itself
    view = panel.long_detail
    assert view.image.shape == (OVERVIEW_PIXELS, OVERVIEW_PIXELS) and view.factor == N // OVERVIEW_PIXELS
    r0, r1, c0, c1 = view.tile_rect
    assert view.plot.getAxis("bottom").labelText == "key (position) \u00b7 exact cells"  # zoomed in: the tile
    assert r0 <= 2000 and r1 >= 2200 and c0 <= 1996 and c1 >= 2196 and max(r1 - r0, c1 - c0) <= TILE_MAX
    # the tile, the row and the overview equal what the full head gives (one head computed here, for the check)
    full = trace.head(1, 2, "scores")
    np.testing.assert_allclose(np.nan_to_num(view.tile_values, neginf=0), np.nan_to_num(full[r0:r1, c0:c1], neginf=0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(panel.row_values[:2101], full[2100, :2101], rtol=1e-5, atol=1e-5)
    assert np.isneginf(panel.row_values[2101:]).all()
    pooled = np.where(np.isneginf(full), -np.inf, full).reshape(512, 8, 512, 8).max(axis=(1, 3))
    np.testing.assert_allclose(np.nan_to_num(view.image, nan=-np.inf), pooled, rtol=1e-5, atol=1e-5)
    alpha = view.tile_mask.image[..., 3] > 0  # the tile's masked cells are grey, the rest shows the values
    assert np.array_equal(alpha, ~np.isfinite(view.tile_values)) and alpha.any() and not alpha.all()
    exported, rows, cols = panel._detail_data()  # an export takes what is shown: the exact tile here
    assert exported.shape == (r1 - r0, c1 - c0) and len(rows) == r1 - r0 and len(cols) == c1 - c0
    assert view.cell_text(2100, 2050).startswith("query")  # inside the tile: an exact value
    assert view.cell_text(10, 3000).startswith("queries")  # outside: a pooled block
    view.plot.setRange(xRange=(0, N), yRange=(0, N), padding=0)
    view.refresh_tile()  # zoomed out: the axis says the picture is pooled again
    assert view.tile_rect is None
    assert "max over 8\u00d78-token blocks" in view.plot.getAxis("bottom").labelText


def test_the_cosine_map_of_a_long_prompt_is_pooled(qtbot, model):
    from explorer.core.analysis.vectors import pooled_cosine_similarity
    from explorer.ui.panels.embeddings import COSINE_PIXELS, EmbeddingsPanel

    ids = [int(i) for i in np.random.default_rng(2).integers(0, 64, N)]
    trace, _ = capture(model, ids, [f"t{i}" for i in ids])
    selection = Selection()
    panel = EmbeddingsPanel(selection)
    qtbot.addWidget(panel)
    selection.clamp(2, 4, N)
    panel.set_trace(trace)
    cosine = panel.cosine_map.matrix
    assert cosine.shape == (COSINE_PIXELS, COSINE_PIXELS)
    np.testing.assert_allclose(cosine, pooled_cosine_similarity(panel._vectors[panel._space_key()], COSINE_PIXELS)[0],
                               rtol=1e-5, atol=1e-6)
    assert panel.cosine_map.row_labels[1] == "tokens 8\u201315" and "mean over 8\u00d78" in \
        panel.cosine_map.plot.titleLabel.text
    panel.cosine_map.cell_clicked.emit(3, 0)
    assert selection.token == 24


def test_long_query_row_pattern_is_exact(qtbot, model):
    ids = [int(i) for i in np.random.default_rng(1).integers(0, 64, 1500)]  # a long prompt's row, exact
    trace, _ = capture(model, ids, [f"t{i}" for i in ids])
    monkey_rows = tiles.query_row(trace, 0, 1, "pattern", 1499)
    np.testing.assert_allclose(monkey_rows, trace.head(0, 1, "pattern")[1499], rtol=1e-5, atol=1e-7)
    assert monkey_rows.sum() == pytest.approx(1.0, abs=1e-5)


def test_a_head_switch_keeps_the_colour_bar_and_a_kind_switch_sets_it(qtbot, model, monkeypatch):
    import pyqtgraph as pg

    from explorer.ui.panels.attention.long_detail import LongHeadView

    ids = [int(i) for i in np.random.default_rng(0).integers(0, 64, 40)]
    trace, _ = capture(model, ids, [f"t{i}" for i in ids])
    view = LongHeadView()
    qtbot.addWidget(view)
    calls = []
    monkeypatch.setattr(view.colorbar, "setColorMap", lambda cmap, original=view.colorbar.setColorMap:
                        (calls.append(cmap.name), original(cmap))[1])
    pooled = tiles.overview(trace, 0, 0, "pattern", 32)
    for head in (0, 1, 2):  # a head switch: the same colour map
        view.set_head(trace, 0, head, "pattern", "pattern", pooled, pg.colormap.get("viridis"), False, f"H{head}")
    assert calls == ["viridis"] and view.overview.lut is not None
    lut = view.overview.lut.copy()
    view.set_head(trace, 0, 2, "scores", "scaled score", tiles.overview(trace, 0, 2, "scores", 32),
                  pg.colormap.get("CET-D1"), True, "H2 scores")
    assert calls == ["viridis", "CET-D1"] and not np.array_equal(view.overview.lut, lut)
    assert view.colorbar.levels()[0] < 0  # symmetric levels for the scores
