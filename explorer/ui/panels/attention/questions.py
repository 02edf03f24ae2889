"""The Attention panel's right-click questions on the selected head: a cell of its pattern or scores (and a
long prompt's view of it) asks "Why does it attend here?" (query i, key j) and "What does it move?" (query i);
a bar of the query row asks them for the row's query and that bar's key (``ui/interventions/questions.py``,
answered by the QK/OV panel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.ui.interventions.questions import Asker, key_under, question_target
from explorer.ui.interventions.targets import Target
from explorer.ui.panels.attention.long_detail import is_long

if TYPE_CHECKING:
    from explorer.ui.panels.attention.panel import AttentionPanel


def attention_questions(panel: AttentionPanel) -> list[Target]:
    """The question targets of the detail heatmap, the long-prompt view and the query-row bars."""
    def asker() -> Asker | None:
        if panel.trace is None or panel.session is None:
            return None
        return Asker(panel.session, *panel.layer_head())

    def scored(query: int, key: int) -> bool:  # a masked cell has no score: only "What does it move?"
        if is_long(panel.trace):  # (its mask is not held: causal models hide later keys; the split says the rest)
            return key <= query or not panel.trace.config.causal
        masked = panel.detail.masked
        return not (query < masked.shape[0] and key < masked.shape[1] and masked[query, key])

    row = panel.row_plot.getPlotItem()
    key_at = key_under(row, lambda: panel.trace.n_tokens if panel.trace is not None else 0)

    def row_cell(scene_pos):
        key = key_at(scene_pos)
        return None if key is None else (panel.query_row(), key)

    return [question_target(panel.detail.plot, panel.detail.cell_at, asker, scored),
            question_target(panel.long_detail.plot, panel.long_detail.cell_at, asker, scored),
            question_target(row, row_cell, asker, scored)]
