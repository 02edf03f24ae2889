"""The direct logit attribution's chosen target and distractor: typed or picked from the top
predictions, the logit difference attributed (the core function the CLI's patch uses), a choice that
is not one token refused with a line, the choice kept across prompts and read again (or cleared with
a line) for another model."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.ui.panels.interventions.dla import DLAPanel, dla_target
from explorer.core.display.tokens import visible
from explorer.ui.panels.interventions.dla_choice import TOP, top_predictions

PROMPT = "When Mary and John went to the store, John gave a drink to"


def raised(qtbot, window, panel) -> None:
    next(d for d in window.docks if d.panel is panel).raise_()
    qtbot.waitUntil(lambda: panel.trace is window.trace and not panel.computing(), timeout=30_000)


def result_for(qtbot, panel, target, distractor=None):
    qtbot.waitUntil(lambda: panel.result is not None and panel.result.target == target
                    and panel.result.distractor == distractor, timeout=30_000)
    return panel.result


def test_a_chosen_target_and_distractor(qtbot, window):
    panel = next(p for p in window.panels if isinstance(p, DLAPanel))
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(PROMPT)
    raised(qtbot, window, panel)
    trace, tok = window.trace, window.loaded.tokenizer
    last = trace.n_tokens - 1
    result_for(qtbot, panel, dla_target(trace, last))
    # the lists offer the top predictions at the selected position
    top = top_predictions(trace["logits"][last])
    assert panel.choose.target.count() == TOP + 1 and panel.choose.target.itemData(1)[0] == top[0][0]
    # a typed target
    mary, john = tok.encode(" Mary")[0], tok.encode(" John")[0]
    panel.choose.set_pick("target", " Mary")
    d = result_for(qtbot, panel, mary)
    logits = trace["logits"][last].astype(np.float64)
    assert d.logit == pytest.approx(logits[mary], abs=1e-3) and d.total == pytest.approx(d.logit, abs=1e-3)
    assert "Mary" in panel.info.text()
    # and a distractor: the logit difference, split exactly as the CLI's patch does
    panel.choose.set_pick("distractor", " John")
    d = result_for(qtbot, panel, mary, john)
    assert d.logit == pytest.approx(logits[mary] - logits[john], abs=1e-3)
    assert d.total == pytest.approx(d.logit, abs=1e-3)
    assert "minus the logit of" in panel.info.text() and "John" in panel.info.text()
    # picked from the list: the third prediction
    panel.choose.target.activated.emit(3)
    result_for(qtbot, panel, top[2][0], john)
    # not one token: one line, and the default target meanwhile
    panel.choose.set_pick("target", " Mary and John")
    result_for(qtbot, panel, dla_target(trace, last), john)
    assert "is 3 tokens for this model, not one" in panel.info.text()
    # a new prompt keeps the choice; the list follows the prompt
    panel.choose.set_pick("target", " Mary")
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt("The cat sat on the")
    raised(qtbot, window, panel)
    result_for(qtbot, panel, mary, john)
    new_top = top_predictions(window.trace["logits"][window.trace.n_tokens - 1])
    assert panel.choose.target.itemData(1)[0] == new_top[0][0]
    assert panel.choose.target.currentText() == " Mary"


def test_a_new_model_reads_the_choice_again_or_clears_it(qtbot, window, other_checkpoint, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)  # its own prompt
    panel = next(p for p in window.panels if isinstance(p, DLAPanel))
    raised(qtbot, window, panel)
    panel.choose.set_pick("target", " Mary")
    panel.choose.set_pick("distractor", " John")
    mary = window.loaded.tokenizer.encode(" Mary")[0]
    result_for(qtbot, panel, mary, window.loaded.tokenizer.encode(" John")[0])
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):  # the same vocabulary: kept
        window.open_checkpoint(str(other_checkpoint))
    raised(qtbot, window, panel)
    assert result_for(qtbot, panel, mary, window.loaded.tokenizer.encode(" John")[0]).target == mary
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):  # four words: " Mary" is not one of them
        window.open_checkpoint("worked-example")
    raised(qtbot, window, panel)
    assert panel.choose.picks == {"target": None, "distractor": None}
    assert "A new model: the target ' Mary'" in panel.info.text() and "cleared" in panel.info.text()
    assert panel.choose.target.currentText() == "next token"



def test_a_token_switch_offers_that_tokens_predictions_as_a_fresh_draw_does(qtbot, window, monkeypatch):
    # as for a 128k vocabulary: the predictions at a newly selected token are computed on a worker
    monkeypatch.setattr("explorer.ui.panels.interventions.dla.TOP_NOW_VOCAB", 0)
    panel = next(p for p in window.panels if isinstance(p, DLAPanel))
    with qtbot.waitSignal(window.trace_applied, timeout=30_000):
        window.set_prompt(PROMPT)
    raised(qtbot, window, panel)
    trace, tok = window.trace, window.loaded.tokenizer
    assert trace.memo_get(("dla.top", 2)) is None and trace.memo_get(("dla.top", 5)) is None

    def offered() -> list:
        combo = panel.choose.target
        return [(combo.itemData(i)[0], combo.itemText(i)) for i in range(1, combo.count())]

    def fresh(t: int) -> list:  # what the lists show drawn from scratch at t
        return [(i, f"{visible(tok.display(i))}  (p {p:.3f})") for i, p in top_predictions(trace["logits"][t])]

    seen = []
    for t in (2, 5, 2, 5):  # new positions, then ones kept with the trace
        known = trace.memo_get(("dla.top", t)) is not None
        panel.selection.set_token(t)
        assert offered() == (fresh(t) if known else [])  # never another token's predictions
        qtbot.waitUntil(lambda: not panel.computing(), timeout=30_000)
        assert offered() == fresh(t) and len(fresh(t)) == TOP
        seen.append(known)
    assert seen == [False, False, True, True]  # the first two came from a worker
    # a switch between listed positions rewrites the rows in place; the same list again rewrites nothing
    combo, calls = panel.choose.target, []
    for name in ("addItem", "removeItem", "clear", "setItemText", "setCurrentText"):
        monkeypatch.setattr(combo, name, lambda *args, name=name, original=getattr(combo, name):
                            (calls.append(name), original(*args))[1])
    panel.selection.set_token(2)
    assert offered() == fresh(2) and "setItemText" in calls
    assert not {"addItem", "removeItem", "clear"} & set(calls)
    calls.clear()
    panel.choose.offer(tok, top_predictions(trace["logits"][2]))
    assert calls == [] and offered() == fresh(2) and combo.currentText() == combo.itemText(0)
