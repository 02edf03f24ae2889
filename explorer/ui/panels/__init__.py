"""The panels. Which there are, in which order, with which titles: ``registry.PANELS`` (one record each)."""

from __future__ import annotations

from explorer.ui.panels.registry import GENERATION, PANELS, PanelSpec, available, panel_classes, spec, spec_of

__all__ = ["GENERATION", "PANELS", "PanelSpec", "available", "panel_classes", "spec", "spec_of"]
