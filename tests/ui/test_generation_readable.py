"""The generation pane with a long prompt and a small context: it scrolls to the new tokens, and the
cap on new tokens is shown instead of silently cutting a larger number."""

from __future__ import annotations

from explorer.ui.generation import GenerationPane
from explorer.ui.generation.token_text import TokenText
from explorer.ui.session.selection import Selection


def test_a_long_prompt_scrolls_to_the_new_tokens(qtbot):
    text = TokenText()
    qtbot.addWidget(text)
    text.resize(300, 120)
    text.show()
    text.start("a long prompt line\n" * 80)
    text.append_tokens([(0, " new", 0.5), (1, " tokens", 0.25)])
    scroll = text.verticalScrollBar()
    assert scroll.maximum() > 0 and scroll.value() == scroll.maximum()
    rect = text.token_rect(1)
    assert rect is not None and text.viewport().rect().intersects(rect)  # the new token is on screen


def test_max_new_tokens_shows_the_models_cap(qtbot, tiny_loaded):
    pane = GenerationPane(Selection())
    qtbot.addWidget(pane)
    pane.set_model(tiny_loaded)
    cap = tiny_loaded.config.n_ctx
    assert pane.max_new.maximum() == cap
    assert f"max {cap}" in pane.max_new.text() and f"at most {cap}" in pane.max_new.toolTip()
