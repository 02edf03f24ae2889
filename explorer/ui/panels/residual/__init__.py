"""The residual stream & logit lens panel (see ``panel.py``): ``lens`` computes and draws the logit
lens, ``cells`` holds the cell texts, the described heatmap and the text formatting."""

from explorer.ui.panels.residual.cells import CellTexts, percent, visible_text
from explorer.ui.panels.residual.lens import LENS_TOP
from explorer.ui.panels.residual.panel import ResidualPanel

__all__ = ["LENS_TOP", "CellTexts", "ResidualPanel", "percent", "visible_text"]
