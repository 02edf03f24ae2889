"""The status bar says what the numbers were computed in and what the weights are stored in."""

from __future__ import annotations

from explorer.ui.window.chrome.status_bar import StatusBar

INFO = {"name": "m", "description": "d", "source": "s", "vocabulary": "v", "context_length": 8, "parameters": 10,
        "device": "cpu", "dtype": "float32"}


def test_kept_weights_show_beside_the_compute_precision(qtbot):
    bar = StatusBar()
    qtbot.addWidget(bar)
    bar.show_model({**INFO, "stored": "Q4_K+Q6_K",
                    "weights": "matrices kept as in the file: Q4_K (96), Q6_K (17); the rest float32"})
    assert bar.fields["dtype"].text() == "float32 · Q4_K+Q6_K"
    tip = bar.fields["dtype"].toolTip()
    assert "computed in float32" in tip and "Q6_K (17)" in tip
    bar.show_model({**INFO, "stored": "float32", "weights": "float32"})
    assert bar.fields["dtype"].text() == "float32"
    bar.show_model(INFO)  # an older info without the storage: as before
    assert bar.fields["dtype"].text() == "float32" and "computed in float32" in bar.fields["dtype"].toolTip()
