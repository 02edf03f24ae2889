"""The Features panel (see ``panel.py``): ``views`` computes what it draws from a trace and an SAE."""

from explorer.ui.panels.features.panel import FeaturesPanel
from explorer.ui.panels.features.views import FeaturesSnapshot, FeaturesView

__all__ = ["FeaturesPanel", "FeaturesSnapshot", "FeaturesView"]
