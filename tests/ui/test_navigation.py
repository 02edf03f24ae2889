"""The panels' navigation: every tab's title readable at laptop and desktop sizes (the full title in
its tooltip and the View menu), and panels that do not apply to the model hidden."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QTabBar, QToolTip

from explorer.ui.panels.registry import PANELS


@pytest.fixture(scope="module")
def tiny_mlm_bert(tmp_path_factory):
    """A random BertForMaskedLM with a WordPiece tokenizer (written here: no download)."""
    import transformers
    import torch

    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "."]
    cfg = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    transformers.BertForMaskedLM(cfg).save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(path)
    return path


def panel_tab_bars(window):
    """The window's visible tab bars that hold panel tabs."""
    shorts = {d.windowTitle() for d in window.docks}
    return [bar for bar in window.findChildren(QTabBar)
            if bar.isVisible() and any(bar.tabText(i) in shorts for i in range(bar.count()))]


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_every_tab_title_is_readable(qtbot, make_window, size):
    window = make_window()
    window.resize(*size)
    from explorer.ui.window.docks import size_docks

    size_docks(window, window.docks, window.generation_dock)
    qtbot.waitUntil(lambda: bool(panel_tab_bars(window)))
    QApplication.processEvents()
    seen = 0
    for bar in panel_tab_bars(window):
        for i in range(bar.count()):
            text = bar.tabText(i)
            # elided: Qt gives the tab less than the width its whole text needs
            assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), f"tab {text!r} is cut at {size}"
            # the bar scrolls to tabs past its end rather than cut every title (issue 42, item 9)
            assert bar.tabRect(i).right() <= bar.width() or bar.usesScrollButtons(), f"tab {text!r} is off the bar at {size}"
            seen += 1
    assert seen >= 7  # the panels are tabs (one may be hidden: it does not apply to this window's model)
    assert {p.dock_name for p in PANELS if p.short_title} == {d.objectName() for d in window.docks}  # all short


def test_the_full_title_is_in_the_tooltip_and_the_view_menu(qtbot, make_window, monkeypatch):
    window = make_window()
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: bool(panel_tab_bars(window)))
    titles = window.tab_titles
    shown = []
    monkeypatch.setattr(QToolTip, "showText", lambda pos, text, *a: shown.append(text))
    for bar in panel_tab_bars(window):
        for i in range(bar.count()):
            dock = next((d for d in window.docks if d.windowTitle() == bar.tabText(i)), None)
            if dock is None:  # the generation pane, whose bar holds the Journey tab: not a panel
                assert bar.tabText(i) == window.generation_dock.windowTitle()
                continue
            assert titles.tooltip(bar, i) == dock.panel.title
            centre = bar.tabRect(i).center()
            event = QHelpEvent(QEvent.Type.ToolTip, centre, bar.mapToGlobal(centre))
            assert titles.eventFilter(bar, event) is True
            assert shown[-1] == dock.panel.title
    assert titles.tooltip(panel_tab_bars(window)[0], 99) is None
    residual = next(d for d in window.docks if d.objectName() == "dock-residual")
    assert residual.windowTitle() == "Residual"
    assert residual.toggleViewAction().text().replace("&&", "&") == "Residual stream & logit lens"


def masked_dock(window):
    return next(d for d in window.docks if d.objectName() == "dock-masked")


def tab_texts(window) -> set[str]:
    return {bar.tabText(i) for bar in panel_tab_bars(window) for i in range(bar.count())}


def test_a_panel_that_does_not_apply_is_hidden_and_comes_back(qtbot, make_window, tiny_checkpoint,
                                                             tiny_mlm_bert, settings):
    window = make_window()
    window.resize(1280, 800)
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    dock = masked_dock(window)
    assert dock.isHidden() and "Masked" not in tab_texts(window)  # a decoder: no tab saying it does not apply
    assert not dock.toggleViewAction().isEnabled()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(tiny_mlm_bert))
    qtbot.waitUntil(lambda: "Masked" in tab_texts(window))  # back, as a tab among the others
    assert not dock.isHidden() and dock.toggleViewAction().isEnabled()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    qtbot.waitUntil(lambda: dock.isHidden())
    window.save_window()  # the saved layout does not remember it as closed by the user
    assert dock.isHidden()
    later = make_window(settings=settings)
    with qtbot.waitSignal(later.trace_applied, timeout=60_000):
        later.open_checkpoint(str(tiny_mlm_bert))
    assert not masked_dock(later).isHidden()


def test_a_panel_the_user_closed_stays_closed(qtbot, make_window, tiny_mlm_bert, tiny_checkpoint):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(tiny_mlm_bert))
    dock = masked_dock(window)
    dock.close()  # the user's choice
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.open_checkpoint(str(tiny_mlm_bert))
    assert dock.isHidden() and dock.toggleViewAction().isEnabled()
