"""The provenance record of what the window exports (``core/provenance.py``): the app's and libraries'
versions, the model and the SHA-256 of its files, precision, device, capture, interventions, verify's result.

The model's files are hashed on a worker once the model loads (``window/session_files.py``); an export
never reads them on the GUI thread: before that hash is done its record says ``"sha256": null``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.core.trace import Trace
    from explorer.ui.session.session import Session


def record_for(session: Session | None, trace: Trace | None, what: str) -> dict[str, Any] | None:
    """The record of an export of ``trace`` (None without one)."""
    from explorer.core import provenance
    from explorer.core.model_files import fingerprint

    if trace is None:
        return None
    source = session.source if session is not None else None
    files = None
    if source is not None:
        try:
            files = fingerprint(source, read=False)  # only what was hashed already: no file read here
        except OSError:
            files = None
    extra = {"prompt": session.prompt} if session is not None else {}
    if session is not None and session.trace_file is not None:
        extra["trace_file"] = session.trace_file
        extra["exported_from"] = trace.meta.extra.get("provenance") or None  # the file's own record
    return provenance.record(trace, source=None if source is None else str(source), fingerprint=files,
                             what=what, **extra)


def record_near(widget: Any, what: str) -> dict[str, Any] | None:
    """The record for an export from ``widget``: the panel it sits in names the trace and the session."""
    while widget is not None:
        trace, session = getattr(widget, "trace", None), getattr(widget, "session", None)
        if trace is not None and hasattr(trace, "meta"):
            return record_for(session if hasattr(session, "source") else None, trace, what)
        parent = getattr(widget, "parentWidget", None)
        widget = parent() if callable(parent) else None
    return None


def write_beside(path: str | os.PathLike[str], record: dict[str, Any] | None) -> Path | None:
    """``<path>.provenance.json`` beside an exported file (nothing when there is no record)."""
    from explorer.core import provenance

    if record is None:
        return None
    return provenance.write(provenance.sidecar(path), record)
