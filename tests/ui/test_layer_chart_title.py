"""The token-across-layers chart names its token as text: a token such as "<extra_7>" is written as typed, in a
wide chart and elided in a narrow one, never as a tag and never as escaped entities ("&lt;extra…")."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.ui.widgets.layer_chart import LayerChart


@pytest.mark.parametrize("width", [900, 240])
def test_a_token_that_looks_like_a_tag_is_written_as_text(qtbot, width):
    chart = LayerChart()
    qtbot.addWidget(chart)
    chart.resize(width, 400)
    chart.show()
    qtbot.waitExposed(chart)
    title = "'<extra_7>' & ' Paris' after 12:'the': rank 3 at the output"
    chart.show_path(["embed", "after 0", "after 1"], np.array([0.1, 0.2, 0.7]), np.array([5, 2, 0]), title)
    label = chart.prob_plot.titleLabel
    qtbot.waitUntil(lambda: label.item.toPlainText() != "", timeout=5_000)
    shown = label.item.toPlainText()
    assert "&lt;" not in shown and "&amp;" not in shown and "&#" not in shown
    assert shown.startswith("'<extra_7>'")
    if width == 900:
        assert shown == title
    else:
        assert shown.endswith("\u2026") and label.toolTip() == title  # elided; the whole title in the tooltip
