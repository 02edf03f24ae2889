"""The Qt desktop app: main window, one module per panel, small widgets, background workers.

Panels read a ``Trace`` and the shared ``Selection``; they never run the model.
Importing this package picks the PySide6 binding and sets pyqtgraph's global options once.
"""

import os

os.environ.setdefault("QT_API", "pyside6")

import PySide6  # noqa: E402,F401  (before pyqtgraph, so that it binds to PySide6)
import pyqtgraph as pg  # noqa: E402

# Arrays are [rows, columns] everywhere (matrix order, like numpy), and drawing favours accuracy.
pg.setConfigOptions(imageAxisOrder="row-major", antialias=True, background="w", foreground="k")
