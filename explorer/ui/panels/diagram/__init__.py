"""The Model diagram panel and the tour ("Follow this token through the model")."""

from explorer.ui.panels.diagram.panel import DiagramPanel

__all__ = ["DiagramPanel"]
