"""Exports from the window: attention maps in a worker with progress and Cancel, into a new named
subfolder, drawn without any widget; the last folder remembered; a status message naming what was
written where; tables as clean images with every row; images without UI hints."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QApplication, QTableWidget, QTableWidgetItem

from explorer.ui.export.folders import last_folder, new_subfolder
from explorer.ui.export.images import paper_text, render_png
from explorer.ui.export.raster import heatmap_image


def test_attention_maps_are_written_in_the_background_into_a_new_subfolder(qtbot, window, tmp_path):
    cfg = window.trace.config
    before = {w for w in QApplication.topLevelWidgets() if w.isVisible()}
    export = window.export_attention_maps(str(tmp_path))
    assert export is not None and window.attention_export is export
    # the worker may finish before a signal spy could connect: wait for what finishing does
    qtbot.waitUntil(lambda: bool(export.message) and window.attention_export is None, timeout=60_000)
    folder = export.folder
    assert folder.parent == tmp_path and folder.name == f"attention-maps-tiny-a-{window.trace.n_tokens}-tokens"
    names = sorted(p.name for p in folder.iterdir())
    heads = cfg.n_layers * cfg.n_heads
    assert len(names) == 3 * heads + 1 and "L1_H1.png" in names and "L0_H0.csv" in names
    assert "provenance.json" in names  # what produced them (issue 42)
    assert not list(tmp_path.glob("*.png"))  # nothing dropped beside the subfolder
    np.testing.assert_allclose(np.load(folder / "L1_H0.npy"), window.trace.head(1, 0, "pattern"))
    shown = window.status.currentMessage()
    assert f"Wrote {heads} attention maps" in shown and str(folder) in shown
    assert last_folder(window) == str(tmp_path)
    appeared = {w for w in QApplication.topLevelWidgets() if w.isVisible()} - before
    assert not any(isinstance(w, pg.GraphicsView) for w in appeared), "a render window was shown"
    again = window.export_attention_maps(str(tmp_path))  # a second export: a second subfolder
    qtbot.waitUntil(lambda: bool(again.message) and window.attention_export is None, timeout=60_000)
    assert again.folder.name == folder.name + "-2"


def test_cancel_stops_the_attention_maps_worker(qtbot, window, tmp_path):
    export = window.export_attention_maps(str(tmp_path))
    export.cancel.set()  # what the progress dialog's Cancel does
    # the cancelled worker may finish before a signal spy could connect: wait for what finishing does
    qtbot.waitUntil(lambda: bool(export.message) and window.attention_export is None, timeout=60_000)
    total = window.trace.config.n_layers * window.trace.config.n_heads
    assert export.done < total and "Cancelled" in window.status.currentMessage()
    assert len(list(export.folder.glob("*.png"))) == export.done
    assert window.attention_export is None


def test_new_subfolder_never_reuses_a_name(tmp_path):
    first = new_subfolder(tmp_path, "maps of: model/1")
    second = new_subfolder(tmp_path, "maps of: model/1")
    assert first.is_dir() and second.is_dir() and first != second and "/" not in first.name[len(str(tmp_path)):]


def test_table_images_hold_every_row_and_titles_lose_ui_hints(qtbot):
    table = QTableWidget(40, 2)
    qtbot.addWidget(table)
    table.setHorizontalHeaderLabels(["token", "cosine"])
    for r in range(40):
        table.setItem(r, 0, QTableWidgetItem(f"tok{r}"))
        table.setItem(r, 1, QTableWidgetItem(f"{1 - r / 100:.4f}"))
    table.resize(200, 120)  # on screen only a few rows fit
    image = render_png(table)
    assert image.height() > 40 * table.fontMetrics().height()  # every row, not a screenshot
    assert paper_text("one-hot input of token 3 'a' (last; click a chip)") == "one-hot input of token 3 'a' (last)"
    assert paper_text("logit lens: top prediction's probability (hover for the tokens); x") == \
        "logit lens: top prediction's probability; x"


def test_heatmap_image_draws_cells_in_their_colours():
    lut = np.array([[0, 0, 0], [255, 255, 255]], dtype=np.uint8)
    image = heatmap_image(np.array([[0.0, 1.0]]), lut, (0.0, 1.0), ["q"], ["a", "b"], title="t")
    assert image.width() > 2 and image.height() > 2
    colours = {image.pixelColor(x, y).name() for x in range(image.width()) for y in range(image.height())}
    assert "#000000" in colours and "#ffffff" in colours
