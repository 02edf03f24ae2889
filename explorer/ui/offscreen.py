"""Rendering plots without a window: every panel's plots and one attention map per head, as PNGs.

Used by ``explorer export --plots`` and by the main window's File > Export attention maps.
Works without a display: when neither DISPLAY nor WAYLAND_DISPLAY is set, Qt's offscreen
platform is chosen before the QApplication is created.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from explorer.core.loaded import LoadedModel
    from explorer.core.trace import Trace
    from explorer.ui.panels.base import Panel


def ensure_app() -> QApplication:
    """The running QApplication, or a new one (offscreen when there is no display)."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and sys.platform.startswith("linux"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    import explorer.ui  # noqa: F401  (binding and pyqtgraph options first)

    app = QApplication.instance()
    if app is None:
        if os.environ.get("QT_QPA_PLATFORM") == "offscreen":
            _quiet_offscreen_warnings()
        app = QApplication(sys.argv[:1])
    return app


def _quiet_offscreen_warnings() -> None:
    """Drop the offscreen platform's "does not support propagateSizeHints()" line printed per window."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_mode, _context, message: str) -> None:
        if "propagateSizeHints" not in message:
            print(message, file=sys.stderr)

    qInstallMessageHandler(handler)


def available_panel_classes() -> list[type]:
    """The registered panels whose modules import (others are still being written)."""
    from explorer.ui.panels.registry import panel_classes

    return panel_classes()


def _panel_stem(cls: type) -> str:
    """The panel's name in file names: its registry id (``attention``), else its module's (or its package's,
    for ``<package>/panel.py``)."""
    from explorer.ui.panels.registry import spec_of

    record = spec_of(cls)
    if record is not None:
        return record.id
    parts = cls.__module__.split(".")
    return parts[-2] if parts[-1] == "panel" else parts[-1]


def _slug(name: str) -> str:
    """A file-name-safe form of a plot's name ("attention, all heads" -> "attention_all_heads")."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("_").lower() or "plot"


def plot_file_name(cls: type, name: str) -> str:
    """``<panel>_<view>.png``: the view's name without the panel's own name repeated in front of it
    ("what changed: log p…" in what_changed -> ``what_changed_log_p….png``)."""
    panel, view = _panel_stem(cls), _slug(name)
    if view.startswith(panel + "_"):
        view = view[len(panel) + 1:]
    return f"{panel}_{view}.png"


def _has_content(exportable: Any) -> bool:
    """Whether a plot has something to show (What changed without an intervention, patching without a
    corrupted prompt: nothing) - judged by the data behind it."""
    import numpy as np

    try:
        data = np.asarray(exportable.data()[0])
    except Exception:  # noqa: BLE001 - a plot whose data cannot be read is drawn as it is
        return True
    if data.size == 0:
        return False
    return not (np.issubdtype(data.dtype, np.floating) and not np.isfinite(data).any())


WAIT_S = 1800.0  # the longest `export --plots` waits for a panel's background views (a large model's lens)


def _wait_for_views(app: QApplication, panel: Panel) -> bool:
    """Run the event loop until ``panel``'s progressive views (logit lens, all-heads mosaic, nearest
    neighbours…) are all drawn, so no image says "computing…". False when ``WAIT_S`` ran out."""
    import time

    from PySide6.QtCore import QEventLoop, QThread

    deadline = time.monotonic() + WAIT_S
    while panel.computing():
        if time.monotonic() > deadline:
            return False
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        QThread.msleep(5)
    app.processEvents()
    return True


def render_plots(loaded: LoadedModel | None, trace: Trace, out_dir: str | os.PathLike[str],
                 progress: Callable[[str], None] | None = None) -> list[Path]:
    """Show ``trace`` in every panel offscreen, wait for each panel's background views, and write
    ``<panel>_<view>.png`` for each plot that has something to show, and ``attention/L{l}_H{h}.png``
    (with .npy and .csv) per head. Returns the PNGs written. ``progress`` is told, a line at a time,
    which panel of how many is drawn and how many attention maps of how many are written (a GPT-2-small
    trace draws about 290 images: 80 s of silence otherwise)."""
    say = progress or (lambda _text: None)
    app = ensure_app()
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QWidget

    from explorer.ui.export.images import export_png
    from explorer.ui.session.selection import Selection

    out_dir = Path(out_dir)
    written: list[Path] = []
    selection = Selection()
    classes = available_panel_classes()
    for number, cls in enumerate(classes, 1):
        say(f"plots: panel {number} of {len(classes)} ({cls.__name__}), {len(written)} images so far")
        panel = cls(selection)
        try:
            if loaded is not None and hasattr(panel, "set_tokenizer"):
                panel.set_tokenizer(loaded.tokenizer)
            if loaded is not None and hasattr(panel, "set_vocabulary_display"):
                panel.set_vocabulary_display(loaded.tokenizer.display)
            view = panel.prepare(trace, panel.snapshot())
            panel.resize(1100, 900)
            panel.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)  # laid out, never on screen
            panel.show()
            panel.set_on_screen(True)
            panel.set_trace(trace, view)
            app.processEvents()
            if not _wait_for_views(app, panel):
                warnings.warn(f"the {cls.__name__}'s views took over {WAIT_S:.0f} s; its images may be "
                              "unfinished", stacklevel=2)
            for exportable in panel.exportables():
                item = exportable.item
                if isinstance(item, QWidget) and not item.isVisibleTo(panel):
                    continue  # e.g. the positions heatmap of a model with rotary positions
                if not _has_content(exportable):
                    continue  # nothing to show (no intervention, no corrupted prompt): no empty axes
                written.append(export_png(item, out_dir / plot_file_name(cls, exportable.name)))
        except Exception as exc:  # one broken panel must not cost the user the other images
            warnings.warn(f"could not render the {cls.__name__}: {exc!r}", stacklevel=2)
        finally:
            panel.close()
            panel.deleteLater()
    written += [p for p in export_attention_maps(trace, out_dir / "attention", progress=say) if p.suffix == ".png"]
    app.processEvents()
    return written


def export_attention_maps(trace: Trace, directory: str | os.PathLike[str],
                          layers: Sequence[int] | None = None,
                          progress: Callable[[str], None] | None = None) -> list[Path]:
    """One labelled heatmap PNG per head, ``L{l}_H{h}.png``, plus its ``.npy`` and ``.csv``
    (``explorer.ui.export.attention_maps``: drawn on a QImage, no widget, no window).

    Rows are query tokens, columns key tokens; the causal mask is hatched, not coloured.
    Returns every file written.
    """
    ensure_app()
    from explorer.ui.export.attention_maps import write_attention_maps

    written: list[Path] = []
    step = max(1, trace.config.n_heads)  # a line per layer
    for done in write_attention_maps(trace, directory, layers):
        written += done.files
        if progress is not None and (done.done % step == 0 or done.done == done.total):
            progress(f"plots: attention map {done.done} of {done.total} (layer {done.layer})")
    return written
