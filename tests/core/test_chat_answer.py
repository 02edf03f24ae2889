"""Which tokens are "the answer" of a conversation (core/chat/summaries.py ``answer_positions``): the last turn's own
text when the assistant wrote it, else the last token; an earlier answer is not the answer to a later question."""

from __future__ import annotations

from explorer.core.chat.spans import ChatSpans
from explorer.core.chat.summaries import answer_positions


def spans(*runs: tuple[int, str, int], roles: tuple[str, ...]) -> ChatSpans:
    """Spans from (turn, kind, count) runs."""
    turns, kinds = [], []
    for turn, kind, count in runs:
        turns += [turn] * count
        kinds += [kind] * count
    return ChatSpans(tuple(turns), tuple(kinds), roles)


def test_the_last_assistant_turn_is_the_answer():
    s = spans((0, "markup", 2), (0, "content", 3), (1, "markup", 2), (1, "thinking", 2), (1, "content", 4),
              (1, "markup", 1), roles=("user", "assistant"))
    assert answer_positions(s).tolist() == [9, 10, 11, 12]


def test_after_a_later_question_the_answer_is_not_written_yet():
    s = spans((0, "markup", 1), (0, "content", 2), (1, "content", 3), (2, "markup", 1), (2, "content", 2),
              (3, "markup", 2), roles=("user", "assistant", "user", "assistant"))
    assert answer_positions(s).tolist() == [s.n_tokens - 1]  # the generation prompt's last token
    s = spans((0, "content", 2), (1, "content", 3), (2, "content", 2), roles=("user", "assistant", "user"))
    assert answer_positions(s).tolist() == [6]
