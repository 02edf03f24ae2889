"""Panels about interventions: what changed, direct logit attribution, activation patching."""

from explorer.ui.panels.interventions.dla import DLAPanel
from explorer.ui.panels.interventions.patching import PatchingPanel
from explorer.ui.panels.interventions.what_changed import WhatChangedPanel

__all__ = ["DLAPanel", "PatchingPanel", "WhatChangedPanel"]
