"""The comparison's faster paths: B traced beside A from the request on, the tables at a clicked
position computed on a worker (saying so meanwhile) and kept per position."""

from __future__ import annotations

import numpy as np

import explorer.ui.session.compare as compare_module
from explorer.core.analysis.compare import compare_traces
from explorer.core.trace import CaptureSpec


def _compare(qtbot, window, source):
    compare = window.session.compare
    with qtbot.waitSignal(compare.ready, timeout=60_000) as blocker:
        compare.open(str(source))
    return blocker.args[0]


def test_b_starts_when_a_is_requested_and_the_comparison_is_the_same(qtbot, window, other_checkpoint, monkeypatch):
    _compare(qtbot, window, other_checkpoint)
    compare = window.session.compare
    started = []
    real = compare_module.EarlyB

    class Spy(real):
        def __init__(self, *args):
            super().__init__(*args)
            started.append(self)

    monkeypatch.setattr(compare_module, "EarlyB", Spy)
    with qtbot.waitSignal(compare.ready, timeout=60_000) as blocker:
        window.set_prompt("Hello world, once more and again")
    result = blocker.args[0]
    assert len(started) == 1 and started[-1].text == "Hello world, once more and again"
    assert started[-1].trace is not None and started[-1].ids == tuple(result.a.token_ids)  # B's early trace was used
    assert result.b_forward > 0 and result.compare_seconds > 0
    # the same numbers as a comparison with a fresh, full trace of B
    fresh = compare_traces(result.a, compare.other.trace_ids(list(result.a.token_ids), CaptureSpec.full()))
    np.testing.assert_array_equal(result.comparison.resid_cos, fresh.resid_cos)  # the same attention path
    np.testing.assert_array_equal(result.comparison.head_js, fresh.head_js)
    np.testing.assert_array_equal(result.comparison.logit_kl, fresh.logit_kl)
    assert not any(".attn." in k for k in result.b.stored_keys())  # kept: only what B's lens reads


def test_an_early_trace_of_other_ids_is_not_used(window, other_checkpoint):
    from explorer.core.checkpoint import load_checkpoint

    other = load_checkpoint(str(other_checkpoint), device="cpu")
    early = compare_module.EarlyB(other, "Something else entirely")
    b, comparison, *_ = compare_module.compare_pair(window.trace, other, early)
    assert early.trace is not None and early.ids != tuple(window.trace.token_ids)
    assert list(b.token_ids) == list(window.trace.token_ids) and comparison.resid_cos.shape[1] == window.trace.n_tokens


def test_a_click_says_computing_until_the_tables_come_and_a_position_seen_before_is_immediate(qtbot, window,
                                                                                            tiny_checkpoint):
    window.set_prompt("one two three four five six seven")
    qtbot.waitUntil(lambda: window.session.controller.is_idle() and window.trace is not None, timeout=30_000)
    _compare(qtbot, window, tiny_checkpoint)
    view = window.compare_dock.view
    qtbot.waitUntil(lambda: view.tables_position == view.position, timeout=30_000)
    first = view.position
    view.cos.cell_clicked.emit(0, 1)
    assert view.position == 1 and "computing" in view.side_status.text() and not view.dist.isEnabled()
    qtbot.waitUntil(lambda: view.tables_position == 1, timeout=30_000)
    assert "computing" not in view.side_status.text() and view.dist.rowCount() > 0 and view.dist.isEnabled()
    view.cos.cell_clicked.emit(0, first)  # seen before: drawn at once, from what was kept
    assert view.tables_position == first and "computing" not in view.side_status.text()


def test_a_comparison_waiting_for_a_cancelled_b_ends_without_a_word(qtbot, window, other_checkpoint, monkeypatch):
    import pytest

    from explorer.core.cancel import Cancelled
    from explorer.core.checkpoint import load_checkpoint

    other = load_checkpoint(str(other_checkpoint), device="cpu")
    early = compare_module.EarlyB(other, window.session.prompt)
    early.cancel.set()  # a newer request came
    with pytest.raises(Cancelled):
        compare_module.compare_pair(window.trace, other, early)
    compare = window.session.compare
    failed = []
    compare.failed.connect(failed.append)
    compare.other = other
    for raised in (Cancelled(), RuntimeError("boom")):  # the comparison's worker ends with each in turn
        def stopped(*args, raised=raised):
            raise raised

        monkeypatch.setattr(compare_module, "compare_pair", stopped)
        compare.refresh()
        qtbot.waitUntil(compare.is_idle, timeout=30_000)
    assert len(failed) == 1 and failed[0].startswith("comparing failed:") and "boom" in failed[0]
