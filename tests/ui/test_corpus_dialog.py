"""File ▸ Run over a corpus…: the dialog's progress (tokens, tokens/s), Cancel after the first batch (every
finished batch kept), Resume into the same database to the end (the same results as one uninterrupted run),
and the finished run opened in the window; a bad corpus is one line and nothing is written."""

from __future__ import annotations

import threading

from PySide6.QtCore import QThreadPool, Qt
from PySide6.QtTest import QTest

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.corpus import open_run
from explorer.core.corpus.run import run_corpus
from tests.core.corpus_reference import table_rows
from tests.ui.test_corpus_window import write_corpus

W, TOKENS, BATCH = 32, 1024, 4  # 8 batches of 4 windows


def test_the_dialog_shows_progress_cancels_and_resumes_into_the_same_database(qtbot, window, tiny_loaded, tmp_path):
    corpus = write_corpus(tmp_path / "held.jsonl")
    dialog = window.corpus_runs.run_dialog()
    assert dialog.isVisible() and dialog.run_button.text() == "Run"
    assert "tiny-a__sample" in dialog.out.text() and dialog.out.text().endswith(".corpus.db")  # the default name
    dialog.set_corpus(str(corpus))
    assert "tiny-a__held" in dialog.out.text()
    out = tmp_path / "run.db"
    dialog.set_out(out)
    dialog.tokens.setValue(TOKENS)
    dialog.window_size.setValue(W)
    dialog.batch = BATCH

    # the first progress report: the worker waits (in its progress call) until Cancel was clicked
    clicked, seen = threading.Event(), []  # (connections run in order: ``cancel`` is posted before ``hold``)

    def hold(_progress) -> None:  # on the worker's thread
        clicked.wait(30)

    def cancel(_progress) -> None:  # on the GUI thread, after the dialog drew the report
        if not seen:
            seen.append((dialog.status.text(), dialog.bar.value()))
            QTest.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
            clicked.set()

    dialog.relay.progressed.connect(cancel)  # queued first: the worker then waits in ``hold``
    dialog.relay.progressed.connect(hold, Qt.ConnectionType.DirectConnection)
    QTest.mouseClick(dialog.run_button, Qt.MouseButton.LeftButton)
    assert not dialog.run_button.isEnabled() and dialog.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.summary is not None, timeout=60_000)
    text, bar = seen[0]
    assert f"{W * BATCH:,} of {TOKENS:,} tokens" in text and "tokens/s" in text and bar == 1000 * W * BATCH // TOKENS
    assert dialog.summary.cancelled and dialog.summary.tokens == W * BATCH
    assert "Stopped" in dialog.status.text() and f"{W * BATCH:,} tokens are kept" in dialog.status.text()
    assert dialog.run_button.text() == "Resume" and dialog.run_button.isEnabled()
    assert window.session.corpus.run is None                         # nothing opened yet

    dialog.relay.progressed.disconnect(hold)
    dialog.relay.progressed.disconnect(cancel)
    clicked.set()
    with qtbot.waitSignal(window.session.corpus.changed, timeout=60_000):  # done: opened in the window
        QTest.mouseClick(dialog.run_button, Qt.MouseButton.LeftButton)
    assert dialog.summary.tokens == TOKENS and not dialog.summary.cancelled
    assert "Done" in dialog.status.text() and dialog.bar.value() == 1000
    assert window.session.corpus.run.path == out

    whole = run_corpus(tiny_loaded, corpus, tmp_path / "whole.db", window=W, batch=BATCH, tokens=TOKENS).path
    for table in ("documents", "windows", "top"):
        assert table_rows(out, table) == table_rows(whole, table), table
    with open_run(out) as a, open_run(whole) as b:
        assert a.info.tokens == b.info.tokens == TOKENS


def test_a_corpus_that_cannot_be_read_is_one_line(qtbot, window, tmp_path):
    dialog = window.corpus_runs.run_dialog()
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02 not text" * 100)
    dialog.set_corpus(str(tmp_path / "binary.txt"))
    dialog.set_out(tmp_path / "run.db")
    QTest.mouseClick(dialog.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.busy(), timeout=60_000)
    line = dialog.status.text()
    assert "binary.txt" in line and "\n" not in line and dialog.summary is None
    assert window.session.corpus.run is None


def test_closing_the_window_stops_a_run_and_keeps_its_finished_batches(qtbot, make_window, tiny_checkpoint, tmp_path):
    window = make_window()
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.open_checkpoint(str(tiny_checkpoint))
    dialog = window.corpus_runs.run_dialog()
    dialog.set_corpus(str(write_corpus(tmp_path / "held.jsonl")))
    out = tmp_path / "run.db"
    dialog.set_out(out)
    dialog.tokens.setValue(TOKENS)
    dialog.window_size.setValue(W)
    dialog.batch = BATCH
    reported, go_on = threading.Event(), threading.Event()
    dialog.relay.progressed.connect(lambda _p: (reported.set(), go_on.wait(30)), Qt.ConnectionType.DirectConnection)
    QTest.mouseClick(dialog.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(reported.is_set, timeout=60_000)               # the first batch is done, the run goes on
    window.close()                                                  # stops it after the block under way
    go_on.set()
    assert QThreadPool.globalInstance().waitForDone(60_000)
    with open_run(out) as run:                                      # the finished batch is kept, the rest not read
        assert run.info.tokens == W * BATCH and not run.info.complete
