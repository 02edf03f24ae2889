"""The attention panel (see ``panel.py``): ``views`` holds its constants, heatmaps and memoised
computations, ``overview`` the all-heads image and the head-statistics heatmap."""

from explorer.ui.panels.attention.panel import AttentionPanel, AttentionSnapshot
from explorer.ui.panels.attention.views import KINDS, MAX_TILE, statistic_levels

__all__ = ["KINDS", "MAX_TILE", "AttentionPanel", "AttentionSnapshot", "statistic_levels"]
