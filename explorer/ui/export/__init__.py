"""Exporting what the window shows.

* ``menu``: the right-click menu of a plot (``Exportable``, ``attach_export_menu``, ``export_actions``);
* ``images``: PNG and SVG writers; ``data``: the data behind a plot as CSV/NPY;
* ``window_actions``: File > Export trace… and File > Export attention maps…;
* ``offscreen``: rendering every panel's plots without a window (``explorer export --plots``).

The last two are imported where they are used, not here.
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
