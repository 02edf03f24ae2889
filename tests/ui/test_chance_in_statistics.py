"""The head statistics show their chance level (what uniform attention scores on this prompt) in the
plot's title, the table's header and every row's tooltip."""

from __future__ import annotations

from PySide6.QtCore import Qt

import explorer.ui  # noqa: F401  (binds pyqtgraph to PySide6)
from explorer.core.analysis.chance import chance_level
from explorer.ui.panels.attention import AttentionPanel
from explorer.ui.session.selection import Selection

PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat"


def test_chance_levels_beside_head_scores(qtbot, tiny_gpt2):
    loaded, _ = tiny_gpt2
    trace = loaded.trace(PROMPT)
    selection = Selection()
    panel = AttentionPanel(selection)
    qtbot.addWidget(panel)
    trace.materialize(panel.needed_keys(trace, panel.snapshot()))
    selection.clamp(trace.config.n_layers, trace.config.n_heads, trace.n_tokens)
    panel.set_trace(trace)
    panel.show_statistics(True)
    for name in ("induction", "previous_token"):
        panel.set_statistic(name)
        chance = chance_level(name, trace.token_ids, causal=True)
        assert 0 < chance < 0.5
        assert f"(chance {chance:.3f})" in panel.statistics.plot.titleLabel.text
        model = panel.statistics_table.model()
        assert model.headerData(2, Qt.Orientation.Horizontal) == f"value\n(chance {chance:.3f})"  # two lines (issue 42)
        tip = model.headerData(2, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
        assert f"chance level {chance:.4f}" in tip
        assert f"chance level {chance:.4f}" in model.index(0, 2).data(Qt.ItemDataRole.ToolTipRole)
    panel.set_trace(loaded.trace("one two three four"))  # nothing repeats: no induction chance level
    panel.set_statistic("induction")
    assert "chance" not in panel.statistics.plot.titleLabel.text
    assert panel.statistics_table.model().headerData(2, Qt.Orientation.Horizontal) == "value"
