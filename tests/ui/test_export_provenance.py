"""Issue 42: what the window exports says where its numbers come from: a right-click export (CSV, NPY,
PNG) gets ``<file>.provenance.json`` beside it, File > Export trace a ``provenance`` entry in the .npz,
File > Export attention maps a ``provenance.json`` in its folder: the versions, the model and the
SHA-256 of its files (hashed on a worker after the load), precision, device, capture and interventions."""

from __future__ import annotations

import json

import numpy as np
from PySide6.QtWidgets import QFileDialog

from explorer.core.interventions.spec import Intervention
from explorer.core.model_files import fingerprint
from explorer.ui.export import export_actions


def _check(record, window, source):
    assert record["model"]["sha256"] == fingerprint(source).digest
    assert record["model"]["source"] == str(source)
    assert record["versions"]["torch"] and record["versions"]["numpy"]
    assert record["dtype"] == "float32" and record["device"] == "cpu"
    assert record["interventions"] == [{"target": "head", "layer": 1, "mode": "zero", "index": 0}]
    assert record["prompt"] == window.session.prompt and record["tokens"] == window.trace.n_tokens


def test_exports_carry_their_provenance(qtbot, window, tiny_checkpoint, tmp_path, monkeypatch):
    with qtbot.waitSignal(window.trace_applied, timeout=60_000):
        window.session.set_interventions([Intervention("head", 1, 0, "zero")])
    qtbot.waitUntil(lambda: fingerprint(tiny_checkpoint, read=False).digest is not None, timeout=60_000)
    dock = next(d for d in window.docks if type(d.panel).__name__ == "AttentionPanel")
    dock.raise_()  # the Attention tab in front
    attention = dock.panel
    qtbot.waitUntil(lambda: attention.trace is window.trace and not attention.computing(), timeout=60_000)
    exportable = next(e for e in attention.exportables() if e.name == "attention, selected head")
    target = tmp_path / "pattern.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    action = next(a for a in export_actions(exportable, attention) if a.text() == "Export data as CSV…")
    action.trigger()  # the right-click menu's Export data as CSV…
    assert target.is_file()
    _check(json.loads((tmp_path / "pattern.csv.provenance.json").read_text("utf-8")), window, tiny_checkpoint)

    npz = tmp_path / "trace.npz"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(npz), ""))
    window.export_trace_action.trigger()  # File > Export trace…
    qtbot.waitUntil(lambda: npz.is_file(), timeout=60_000)
    _check(json.loads(str(np.load(npz)["provenance"])), window, tiny_checkpoint)

    export = window.export_attention_maps(str(tmp_path))  # File > Export attention maps… into this folder
    qtbot.waitUntil(lambda: window.attention_export is None, timeout=60_000)
    _check(json.loads((export.folder / "provenance.json").read_text("utf-8")), window, tiny_checkpoint)
