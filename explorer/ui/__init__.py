"""The Qt desktop app, in layers (an import-linter contract in pyproject.toml): ``window`` (the main
window and what only it hosts) above ``generation`` and ``panels``, above ``export`` and
``interventions``, above ``session`` (the ``Session``: state and background work, no widgets) and
``widgets`` (reusable plot pieces). ``app``, ``show``, ``crash``, ``theme``, ``icon``,
``explanations`` and ``offscreen`` sit outside the layers.

Panels read a ``Trace`` and the shared ``Selection``; they never run the model.
Importing this package picks the PySide6 binding and sets pyqtgraph's global options once.
"""

import os

os.environ.setdefault("QT_API", "pyside6")

import PySide6  # noqa: E402,F401  (before pyqtgraph, so that it binds to PySide6)
import pyqtgraph as pg  # noqa: E402

# Arrays are [rows, columns] everywhere (matrix order, like numpy), and drawing favours accuracy.
pg.setConfigOptions(imageAxisOrder="row-major", antialias=True, background="w", foreground="k")
