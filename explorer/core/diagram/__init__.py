"""The open model drawn as a data flow (``build_diagram``), live summaries of its boxes for one token
(``box_summary``) and the guided tour of one token through it (``tour_steps``). Qt-free and pure."""

from explorer.core.diagram.boxes import Box, Diagram, Edge, build_diagram
from explorer.core.diagram.summaries import Summary, box_summary, summary_keys

__all__ = ["Box", "Diagram", "Edge", "Summary", "box_summary", "build_diagram", "summary_keys"]
