"""A corpus run in the window: the neuron and feature views' top examples and histograms equal what
``open_run`` reads, a click on an example makes its context the prompt (the model then computes the example's
value at its last token), a run of another model is refused in one line, and the last run of a model opens
again with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.corpus import open_run
from explorer.core.corpus.run import run_corpus
from explorer.core.features.sae import open_sae
from explorer.ui.panels.evidence import AFTER, BEFORE
from tests.ui.test_features_panel import write_sae

ROOT = Path(__file__).resolve().parents[2]
W = 32


def write_corpus(path: Path) -> Path:
    text = (ROOT / "models" / "shakespeare" / "heldout_sample.txt").read_text(encoding="utf-8")
    path.write_text("".join(json.dumps({"text": part}) + "\n" for part in (text[:3000], text[3000:])),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "held.jsonl")


@pytest.fixture(scope="module")
def tiny_run(tiny_loaded, corpus_file, tmp_path_factory) -> Path:
    """The tiny model over the held-out text: 1,024 tokens in windows of 32."""
    return run_corpus(tiny_loaded, corpus_file, tmp_path_factory.mktemp("runs") / "tiny.db", window=W, batch=8,
                      tokens=1024).path


def opened(qtbot, window, path) -> None:
    with qtbot.waitSignal(window.session.corpus.changed, timeout=30_000):
        window.corpus_runs.open(str(path))
    assert window.session.corpus.run is not None and window.session.corpus.run.path == Path(path)


def neurons_shown(qtbot, window):
    window.raise_panel("neurons")
    panel = window.panel("neurons")
    qtbot.waitUntil(lambda: panel.trace is window.trace and window.presenter.is_idle(), timeout=30_000)
    return panel


def test_a_neurons_top_examples_are_the_runs_and_a_click_makes_one_the_prompt(qtbot, window, tiny_run):
    panel = neurons_shown(qtbot, window)
    opened(qtbot, window, tiny_run)
    evidence = panel.detail.evidence
    assert panel.detail.tabs.currentWidget() is evidence           # a run just opened: its evidence in front
    window.selection.set_layer(1)
    qtbot.waitUntil(lambda: panel.layer() == 1 and window.presenter.is_idle(), timeout=30_000)
    panel.select_neuron(5)
    with open_run(tiny_run) as run:
        expected = run.top_examples("neurons", 1, 5, BEFORE, AFTER)
        dist = run.distribution("neurons", 1, 5)
    assert len(expected) == 20 and evidence.shown == expected
    lines = evidence.browser.toPlainText().splitlines()
    for line, example in zip(lines, expected):                      # what the user reads: value, token, place
        assert line.startswith(f"{example.value:.4g}") and f"token {example.position}" in line
    assert str(dist.tokens) in evidence.title.text().replace(",", "") and "1 neuron #5" in evidence.title.text()

    # the histogram: the run's counts as shares of its tokens, this prompt's value marked in its bin
    now = float(panel.bar_values[panel.selected_token])
    bars = evidence.hist_bars.opts
    first = int(bars["x"][0])
    np.testing.assert_allclose(bars["height"], 100.0 * dist.counts[first:first + len(bars["x"])] / dist.tokens,
                               rtol=1e-9)
    assert dist.counts[:first].sum() == 0 and dist.counts[first + len(bars["x"]):].sum() == 0
    assert evidence.marker.isVisible() and evidence.marker.value() == dist.bin_of(now)
    assert "tokens" in evidence.bin_tooltip(dist.bin_of(now)) and "this prompt" in evidence.bin_tooltip(dist.bin_of(now))
    exports = {e.name: e for e in panel.exportables()}               # export and copy: the numbers shown
    values, rows, cols = exports["neuron top examples over the corpus"].data()
    np.testing.assert_array_equal(values, np.float32([e.value for e in expected]))
    assert len(rows) == 20 and rows[0].startswith(expected[0].doc_name) and cols == ["value"]
    counts, rows, cols = exports["neuron histogram over the corpus"].data()
    np.testing.assert_array_equal(counts, dist.counts)
    assert rows[34] == "exactly 0" and rows[-1] == "> 10000" and cols == ["tokens"]

    # a click on the third example: its context becomes the prompt, the firing token selected
    example = expected[2]
    with open_run(tiny_run) as run:
        ids = run.prompt_ids(example)
    QTest.mouseClick(evidence.browser.viewport(), Qt.MouseButton.LeftButton, pos=evidence.example_point(2))
    qtbot.waitUntil(lambda: window.trace is not None and list(window.trace.token_ids) == ids
                    and panel.trace is window.trace and window.presenter.is_idle(), timeout=30_000)
    assert window.selection.token == len(ids) - 1 and panel.selected_neuron == 5
    assert float(panel.bar_values[-1]) == pytest.approx(example.value, abs=1e-4)  # the model computes that value
    assert evidence.marker.value() == dist.bin_of(example.value)


def test_a_run_of_another_model_is_refused_in_one_line(qtbot, make_window, other_checkpoint, tiny_run, monkeypatch):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(other_checkpoint))
    lines = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a: lines.append(text))
    with qtbot.waitSignal(window.session.corpus.failed, timeout=30_000):
        window.corpus_runs.open(str(tiny_run))
    assert len(lines) == 1 and "\n" not in lines[0] and "another model" in lines[0] and "tiny-a" in lines[0]
    assert window.session.corpus.run is None and not window.panel("head_finder").available()


def test_the_last_run_of_a_model_opens_again_with_it(qtbot, make_window, settings, tiny_checkpoint, tiny_run):
    first = make_window()
    with qtbot.waitSignal(first.trace_applied, timeout=30_000):
        first.open_checkpoint(str(tiny_checkpoint))
    opened(qtbot, first, tiny_run)
    first.close()
    second = make_window(settings=settings)
    with qtbot.waitSignal(second.session.corpus.changed, timeout=60_000):
        second.open_checkpoint(str(tiny_checkpoint))
    assert second.session.corpus.run.path == Path(tiny_run)


def test_a_features_top_examples_are_the_runs_for_its_sae(qtbot, window, tiny_loaded, corpus_file, tmp_path):
    sae_dir = write_sae(tmp_path / "sae")
    sae = open_sae(sae_dir, tiny_loaded.config, tiny_loaded.name)
    path = run_corpus(tiny_loaded, corpus_file, tmp_path / "features.db", sae, window=W, batch=8, tokens=512,
                      units={"features"}, heads=False).path
    window.feature_tools.opener.open(str(sae_dir))
    qtbot.waitUntil(lambda: len(window.session.features.saes) == 1, timeout=30_000)
    panel = window.panel("features")
    opened(qtbot, window, path)
    with open_run(path) as run:
        feature = int(np.argmax(run.unit_table("features", 1)["max"]))
        expected = run.top_examples("features", 1, feature, BEFORE, AFTER)
    panel.choose_feature(feature)
    qtbot.waitUntil(lambda: panel.evidence.unit == (1, feature) and bool(panel.evidence.shown), timeout=30_000)
    assert panel.evidence.shown == expected
    assert panel.evidence.browser.toPlainText().splitlines()[0].startswith(f"{expected[0].value:.4g}")
