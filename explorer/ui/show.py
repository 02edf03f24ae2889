"""``explorer.show(...)``: open the window from Python (a notebook, a script) on a model you hold.

``model_or_path`` is a checkpoint path, a built-in name, a ``LoadedModel``, or an in-memory
``transformers`` model with its tokenizer. An in-memory model is registered under a ``memory:N``
source (``explorer.core.checkpoint.in_memory``), so the window loads it in its worker like any
checkpoint (no files written) and again on another device or precision.

Blocking: outside IPython (or with ``block=True`` and no Qt event loop running there) the call runs
Qt's event loop until the window is closed. In IPython/Jupyter after ``%gui qt`` the loop already
runs, so the call returns the window at once; ``block=False`` always returns at once (the window
then lives while Qt's event loop is run by someone: ``%gui qt``, ``app.exec()``, or a test's qtbot).
"""

from __future__ import annotations

from typing import Any

_windows: list[Any] = []  # a notebook drops the return value: keep the windows alive until closed


def _ipython_runs_qt() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    loop = getattr(shell, "active_eventloop", None) if shell is not None else None
    return isinstance(loop, str) and loop.startswith("qt")


def show(model_or_path: Any = None, tokenizer: Any = None, prompt: str | None = None, block: bool = True,
         device: str = "auto", dtype: str = "float32", settings: Any = None) -> Any:
    """Open the Transformer Explorer window on a model; returns the ``MainWindow``."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from explorer.core.checkpoint.in_memory import register
    from explorer.ui.app import ensure_app
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app()
    if model_or_path is None or isinstance(model_or_path, str) or hasattr(model_or_path, "__fspath__"):
        source = None if model_or_path is None else str(model_or_path)
    else:
        source = register(model_or_path, tokenizer)  # refuses what is neither a model nor a LoadedModel
    window = MainWindow(settings if settings is not None else QSettings(), device=device, dtype=dtype)
    if prompt:
        window.set_prompt(prompt)  # the Session's prompt: traced once the model is there
    window.open_checkpoint(source)
    window.show()
    _windows.append(window)
    window.destroyed.connect(lambda *_: _windows.remove(window) if window in _windows else None)
    if block and not _ipython_runs_qt() and isinstance(app, QApplication):
        app.exec()
    return window
