"""Exporting what the window shows.

* ``menu``: the right-click menu of a plot (``Exportable``, ``attach_export_menu``, ``export_actions``);
* ``images``, ``raster``: PNG and SVG writers; ``data``: the data behind a plot as CSV/NPY;
* ``attention_maps``: one map per head, written by a generator a worker runs.

File > Export… lives with the window (``explorer.ui.window.export_actions``); rendering every panel
without a window is ``explorer.ui.offscreen`` (it imports the panels, which sit above this package).
"""

from explorer.ui.export.data import export_data
from explorer.ui.export.images import (
           SVG_CELL_LIMIT,
           export_png,
           export_svg,
           heatmap_svg,
           render_png,
)
from explorer.ui.export.menu import (
           Exportable,
           ask_path,
           attach_export_menu,
           export_actions,
)

__all__ = ["SVG_CELL_LIMIT", "Exportable", "ask_path", "attach_export_menu", "export_actions", "export_data",
           "export_png", "export_svg", "heatmap_svg", "render_png"]
