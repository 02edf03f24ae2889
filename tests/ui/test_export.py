"""PNG, SVG, CSV and NPY exports of plots, all written atomically; the right-click menu."""

from __future__ import annotations

import csv
import pathlib
import xml.etree.ElementTree as ET

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QLabel

import explorer.ui  # noqa: F401
from explorer.ui import export
from explorer.ui.export.clipboard import copy_data, copy_image, data_tsv
from explorer.ui.export.menu import Exportable
from explorer.ui.panels.base import Panel
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap

SVG = "{http://www.w3.org/2000/svg}"
ROWS = ["0:The", "1: cat", "2: sat & <ran>"]
COLS = ["0:The", "1: cat", "2: sat & <ran>", "3:d"]


@pytest.fixture
def heatmap(qtbot):
    h = Heatmap(title="L0 H1")
    qtbot.addWidget(h)
    h.resize(480, 360)
    h.show()
    qtbot.waitExposed(h)
    m = np.random.default_rng(1).random((3, 4)).astype(np.float32)
    h.set_data(m, ROWS, COLS, masked=np.triu(np.ones((3, 4), bool), 1), value_name="attention")
    return h


def _exportable(h):
    return Exportable("attention", h, lambda: (h.matrix, h.row_labels, h.col_labels))


def _distinct_colours(image: QImage) -> int:
    return len({image.pixel(x, y) for x in range(0, image.width(), 4) for y in range(0, image.height(), 4)})


def test_png_decodes_with_the_requested_width(heatmap, tmp_path):
    path = export.export_png(heatmap, tmp_path / "h.png", width=600)
    image = QImage(str(path))
    assert not image.isNull()
    assert image.width() == 600 and image.height() > 0
    assert _distinct_colours(image) > 10  # not blank


def test_png_of_a_plain_widget(qtbot, tmp_path):
    label = QLabel("hello")
    qtbot.addWidget(label)
    label.resize(120, 40)
    image = QImage(str(export.export_png(label, tmp_path / "l.png")))
    assert (image.width(), image.height()) == (120, 40)


def test_png_of_a_plot_item(qtbot, tmp_path):
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    widget.resize(300, 200)
    widget.plot([0, 1, 2], [0, 4, 1])
    image = QImage(str(export.export_png(widget.getPlotItem(), tmp_path / "p.png")))
    assert image.width() > 0 and _distinct_colours(image) > 1


def test_svg_has_one_rect_per_cell_and_the_labels(heatmap, tmp_path):
    path = export.export_svg(heatmap, tmp_path / "h.svg")
    root = ET.parse(path).getroot()
    cells = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "cell"]
    assert len(cells) == 3 * 4
    assert sum(r.get("fill") == "url(#masked)" for r in cells) == int(np.triu(np.ones((3, 4)), 1).sum())
    texts = [t.text for t in root.iter(f"{SVG}text")]
    for label in set(ROWS + COLS):
        assert label in texts  # escaped on the way in, intact on the way out
    assert "L0 H1" in texts and "attention" in texts
    assert not list(root.iter(f"{SVG}image"))


def test_svg_of_a_large_matrix_embeds_a_png(qtbot, tmp_path):
    h = Heatmap()
    qtbot.addWidget(h)
    labels = [f"{i}:t" for i in range(120)]
    h.set_data(np.random.default_rng(0).random((120, 120)), labels, labels)
    root = ET.parse(export.export_svg(h, tmp_path / "big.svg")).getroot()
    assert not [r for r in root.iter(f"{SVG}rect") if r.get("class") == "cell"]
    images = list(root.iter(f"{SVG}image"))
    assert len(images) == 1 and images[0].get("href").startswith("data:image/png;base64,")


def test_csv_has_the_labels_and_values(heatmap, tmp_path):
    path = export.export_data(_exportable(heatmap), tmp_path / "h.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0][1:] == COLS
    assert [r[0] for r in rows[1:]] == ROWS
    np.testing.assert_allclose(np.array([[float(v) for v in r[1:]] for r in rows[1:]]), heatmap.matrix)


def test_csv_of_a_vector(tmp_path):
    ex = Exportable("norms", None, lambda: (np.array([1.5, 2.5]), ["a", "b"], None))
    with open(export.export_data(ex, tmp_path / "v.csv"), encoding="utf-8") as f:
        assert f.read().splitlines() == [",norms", "a,1.5", "b,2.5"]


def test_npy_round_trips(heatmap, tmp_path):
    path = export.export_data(_exportable(heatmap), tmp_path / "h.npy")
    np.testing.assert_array_equal(np.load(path), heatmap.matrix)
    with pytest.raises(ValueError):
        export.export_data(_exportable(heatmap), tmp_path / "h.txt")


def _half_write_then_fail(monkeypatch, target_cls, name):
    """Make ``target_cls.name`` write half a file to the temporary path, then raise."""

    def fail(self_or_path, *args, **kwargs):
        pathlib.Path(str(args[0]) if target_cls is QImage else str(self_or_path)).write_text("half a fi")
        raise OSError("disk full")

    monkeypatch.setattr(target_cls, name, fail)


@pytest.mark.parametrize("kind", ["png", "svg", "csv", "npy"])
def test_a_failed_write_leaves_the_old_file_and_no_partial(heatmap, tmp_path, monkeypatch, kind):
    target = tmp_path / f"out.{kind}"
    target.write_bytes(b"the previous export")
    if kind == "png":
        _half_write_then_fail(monkeypatch, QImage, "save")
    else:
        _half_write_then_fail(monkeypatch, pathlib.Path, "write_bytes")
    with pytest.raises(OSError):
        if kind == "png":
            export.export_png(heatmap, target)
        elif kind == "svg":
            export.export_svg(heatmap, target)
        else:
            export.export_data(_exportable(heatmap), target)
    monkeypatch.undo()
    assert target.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


EXPORT_TEXTS = ["Export PNG\u2026", "Export SVG\u2026", "Export data as CSV\u2026", "Export data as NPY\u2026",
                "Copy image", "Copy data"]


def test_export_menu_on_the_plot(heatmap):
    assert export.attach_export_menu(_exportable(heatmap))
    texts = [a.text() for a in heatmap.plot.getViewBox().menu.actions()]
    assert texts[:len(EXPORT_TEXTS)] == EXPORT_TEXTS
    export.attach_export_menu(_exportable(heatmap))  # attaching again replaces, never duplicates
    texts = [a.text() for a in heatmap.plot.getViewBox().menu.actions()]
    assert texts.count(EXPORT_TEXTS[0]) == 1
    assert not [a for a in heatmap.scene().contextMenu if "Export" in a.text()]


def test_panel_add_exportable_attaches_the_menu(qtbot):
    class OnePlot(Panel):
        def __init__(self, selection):
            super().__init__(selection)
            self.map = Heatmap()
            self.label = QLabel("a table")
            self.body.addWidget(self.map)
            self.add_exportable("map", self.map, lambda: (self.map.matrix, None, None))
            self.add_exportable("table", self.label, lambda: (np.zeros(2), None, None))

        def show_trace(self, trace):
            pass

    panel = OnePlot(Selection())
    qtbot.addWidget(panel)
    assert [a.text() for a in panel.map.plot.getViewBox().menu.actions()][:len(EXPORT_TEXTS)] == EXPORT_TEXTS
    assert [a.text() for a in panel.label._explorer_export_actions] == EXPORT_TEXTS


def test_copy_data_is_tab_separated_with_labels_and_copy_image_renders(qtbot):
    heatmap = Heatmap()
    qtbot.addWidget(heatmap)
    heatmap.resize(300, 200)
    heatmap.show()
    matrix = np.array([[0.5, -np.inf], [0.25, 0.75]], dtype=np.float32)
    exportable = Exportable("pattern", heatmap, lambda: (matrix, ["0:To", "1: be"], ["0:To", "1: be"]))
    assert data_tsv(exportable) == "\t0:To\t1: be\n0:To\t0.5\t-inf\n1: be\t0.25\t0.75\n"
    assert copy_data(exportable) == QGuiApplication.clipboard().text()
    vector = Exportable("norms", heatmap, lambda: (np.array([1.0, 2.0]), ["a", "b"], None))
    assert data_tsv(vector) == "\tnorms\na\t1.0\nb\t2.0\n"
    copy_image(exportable)
    image = QGuiApplication.clipboard().image()
    assert not image.isNull() and image.width() > 50
