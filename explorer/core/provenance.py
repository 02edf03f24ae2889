"""Where exported numbers come from: one record every export carries.

``record(trace, ...)`` says what produced a trace's numbers: the app's, Python's, torch's, numpy's and
transformers' versions, the model (its name, where it was opened from and the SHA-256 of its files:
``model_files.fingerprint``), the precision and device the forward pass ran in, what the capture stored,
the interventions that changed the run, and the last ``verify`` of that model in this process, if one ran.
It is JSON: ``provenance.json`` in an export folder, ``<file>.provenance.json`` beside a single exported
file, a ``provenance`` entry in ``trace.safetensors``' metadata and in ``trace.npz``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.core.model_files import Fingerprint
    from explorer.core.trace import Trace

FILE = "provenance.json"
SUFFIX = ".provenance.json"
FORMAT = "transformer-explorer provenance"

_verified: dict[str, dict[str, Any]] = {}  # model source -> the last verify's summary, this process's
_lock = threading.Lock()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """The versions that decide the numbers (read from the installed packages: nothing is imported)."""
    return {"transformer-explorer": _version("transformer-explorer"),
            "python": f"{sys.version.split()[0]} ({platform.python_implementation()}, {platform.system()} "
                      f"{platform.machine()})",
            "torch": _version("torch"), "numpy": _version("numpy"), "transformers": _version("transformers"),
            "safetensors": _version("safetensors"), "gguf": _version("gguf")}


def remember_verify(source: str, report: Any) -> None:
    """Keep ``report`` (a ``VerifyReport``) as ``source``'s last verify: the next exports of that model name it."""
    rows = list(getattr(report, "layers", ()))
    summary = {"passed": bool(report.passed), "verdict": report.verdict(), "reference": report.reference,
               "tokens": len(report.ids), "logits_max_diff": report.logits,
               "resid_max_diff": max((r.resid for r in rows), default=None),
               "resid_min_cosine": min((r.cosine for r in rows if r.cosine is not None), default=None)}
    with _lock:
        _verified[str(source)] = summary


def last_verify(source: str | None) -> dict[str, Any] | None:
    with _lock:
        return dict(_verified[str(source)]) if source is not None and str(source) in _verified else None


def record(trace: Trace | None, source: str | None = None, fingerprint: Fingerprint | None = None,
           model_name: str | None = None, what: str = "", **extra: Any) -> dict[str, Any]:
    """The provenance of an export of ``trace`` (None: of the model alone), see the module docstring.
    ``fingerprint``: the model's files (``model_files.fingerprint``); ``what``: what was exported."""
    from explorer.core.interop import capture_settings
    from explorer.core.interventions.spec import describe_all

    meta = trace.meta if trace is not None else None
    model = {"name": model_name or (meta.model_name if meta is not None else None), "source": source,
             "sha256": fingerprint.digest if fingerprint is not None else None,
             "files": [f.name for f in fingerprint.files] if fingerprint is not None else []}
    out: dict[str, Any] = {
        "format": FORMAT, "what": what,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(), "model": model,
        "dtype": meta.dtype if meta is not None else None, "device": meta.device if meta is not None else None,
        "capture": capture_settings(trace) if trace is not None else None,
        "tokens": int(trace.n_tokens) if trace is not None else None,
        "interventions": describe_all(trace.interventions) if trace is not None else [],
        "verify": last_verify(source),
    }
    out.update(extra)
    return out


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, default=str)


def sidecar(path: str | os.PathLike[str]) -> Path:
    """Where the record of a single exported file goes: ``<file>.provenance.json`` beside it."""
    path = Path(path)
    return path.with_name(path.name + SUFFIX)


def write(target: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write ``data`` to ``target`` (atomically)."""
    from explorer.core.export import write_text

    write_text(target, to_json(data) + "\n")
    return Path(target)
