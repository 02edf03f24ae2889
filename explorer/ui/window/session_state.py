"""The window's state as a core ``SessionState`` (``core/session_file.py``), and the parts of it that are
widgets' settings put back: sampling, steering, the DLA's and the patching panel's choices, the layout.

``capture(window)`` reads the Session (model, prompt and ids, selection, interventions, SAEs) and the
widgets' public settings; ``apply_settings(window, state)`` sets those widgets again. What needs the model
(the trace, the interventions, the SAEs) is put back by ``session_files.SessionRestore`` through the
Session's verbs.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray

from explorer.core.session_file import SessionState, intervention_record
from explorer.ui.panels.interventions.dla import DLAPanel
from explorer.ui.panels.interventions.patching import PatchingPanel

if TYPE_CHECKING:
    from explorer.core.model_files import Fingerprint
    from explorer.ui.window.main_window import MainWindow

SAMPLING_CONTROLS = ("temperature", "top_k", "top_p", "min_p", "repetition", "max_new", "seed")
STEERING_TEXTS = ("neuron", "file", "prompt_a", "prompt_b")


def panel_of(window: MainWindow, kind: type) -> Any:
    return next((p for p in window.panels if isinstance(p, kind)), None)


def capture(window: MainWindow, fingerprint: Fingerprint | None = None, app_version: str = "") -> SessionState:
    """What the window shows now (the model must be open)."""
    session = window.session
    loaded, request, trace = session.loaded, session.model_request, session.trace
    if loaded is None or session.source is None:
        raise ValueError("open a model first: a session names the model its numbers come from")
    records = []
    for entry in session.interventions.entries:
        record = intervention_record(entry.intervention)
        if record is not None:  # a patch holds another run's activations: not kept
            records.append({**record, "enabled": bool(entry.enabled)})
    timeline = session.timeline
    selection = {"layer": session.selection.layer, "head": session.selection.head, "token": session.selection.token,
                 "step": timeline.step if timeline.active else None}
    chosen = session.features.selected
    conversation = session.conversation  # a conversation on screen: its turns and the template's options
    chat = conversation.active and trace is not None and trace.meta.chat is not None
    panels = {**_panels(window), **({"chat": conversation.settings()} if chat else {})}
    return SessionState(
        source=str(session.source), prompt=session.prompt, device=request.device if request else "auto",
        dtype=request.dtype if request else "float32", model_name=loaded.name, fingerprint=fingerprint,
        token_ids=[int(i) for i in trace.token_ids] if trace is not None else None, selection=selection,
        interventions=records, saes=[str(sae.path) for sae in session.features.saes],
        feature=None if chosen is None else {"sae": str(chosen[0].path), "index": int(chosen[1])},
        steering=_steering(window), sampling=_sampling(window), panels=panels,
        conversation=conversation.messages_now() if chat else None,
        layout=base64.b64encode(bytes(window.applicable.saved_state(window))).decode("ascii"), saved_by=app_version)


def _sampling(window: MainWindow) -> dict[str, Any]:
    params = window.generation.current_params()
    controls = window.generation.controls
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p, "min_p": params.min_p,
            "repetition_penalty": params.repetition_penalty, "max_new_tokens": params.max_new_tokens,
            "seed": params.seed, "greedy": controls.greedy.isChecked(), "random_seed": controls.random_seed.isChecked()}


def _steering(window: MainWindow) -> dict[str, Any]:
    pane = window.feature_tools.steering
    out: dict[str, Any] = {name: getattr(pane, name).text() for name in STEERING_TEXTS}
    out.update(direction=pane.source.currentIndex(), layer=pane.layer.value(), alpha=pane.alpha.value())
    return out


def _panels(window: MainWindow) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    dla = panel_of(window, DLAPanel)
    if dla is not None:
        picks = {what: (pick[1] if pick is not None else None) for what, pick in dla.choose.picks.items()}
        shown = dla.result  # what the panel shows: the ids the attribution is of
        out["dla"] = {"target_text": picks.get("target"), "distractor_text": picks.get("distractor"),
                      **({"target": int(shown.target), "position": int(shown.position),
                          "distractor": None if shown.distractor is None else int(shown.distractor)}
                         if shown is not None else {})}
    patching = panel_of(window, PatchingPanel)
    if patching is not None:
        result = patching.result
        mode = None if result is None else "estimate" if hasattr(result, "exact_runs") else "exact"
        out["patching"] = {"corrupted": patching.corrupt_edit.text(), "target": patching.target_edit.text(),
                           "distractor": patching.distractor_edit.text(), "mode": mode}
    return out


def apply_settings(window: MainWindow, state: SessionState) -> None:
    """Put the widgets' settings of ``state`` back (sampling, steering, the panels' choices, the layout)."""
    controls, sampling = window.generation.controls, state.sampling
    values = {"temperature": sampling.get("temperature"), "top_k": sampling.get("top_k"),
              "top_p": sampling.get("top_p"), "min_p": sampling.get("min_p"),
              "repetition": sampling.get("repetition_penalty"), "max_new": sampling.get("max_new_tokens"),
              "seed": sampling.get("seed")}
    if isinstance(sampling.get("greedy"), bool):
        controls.greedy.setChecked(sampling["greedy"])
    for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (
                name == "temperature" and sampling.get("greedy")):
            widget = getattr(controls, name)
            widget.setValue(type(widget.value())(value))
    if isinstance(sampling.get("random_seed"), bool):
        controls.random_seed.setChecked(sampling["random_seed"])
    pane, steering = window.feature_tools.steering, state.steering
    for name in STEERING_TEXTS:
        if isinstance(steering.get(name), str):
            getattr(pane, name).setText(steering[name])
    if isinstance(steering.get("direction"), int):
        pane.source.setCurrentIndex(steering["direction"])
    if isinstance(steering.get("layer"), int):
        pane.layer.setValue(steering["layer"])
    if isinstance(steering.get("alpha"), (int, float)):
        pane.alpha.setValue(float(steering["alpha"]))
    _apply_panels(window, state.panels)
    if state.layout:
        try:
            window.restoreState(QByteArray(base64.b64decode(state.layout.encode("ascii"), validate=True)))
        except (ValueError, UnicodeEncodeError):
            pass  # a layout that is not one: the window keeps its own


def _apply_panels(window: MainWindow, panels: dict[str, dict[str, Any]]) -> None:
    dla, saved = panel_of(window, DLAPanel), panels.get("dla") or {}
    if dla is not None:
        for what in ("target", "distractor"):
            text = saved.get(f"{what}_text")
            dla.choose.set_pick(what, text if isinstance(text, str) else None)
    patching, saved = panel_of(window, PatchingPanel), panels.get("patching") or {}
    if patching is not None:
        for edit, key in ((patching.corrupt_edit, "corrupted"), (patching.target_edit, "target"),
                          (patching.distractor_edit, "distractor")):
            if isinstance(saved.get(key), str):
                edit.setText(saved[key])
        index = patching.mode_box.findData(saved.get("mode"))
        if index >= 0:
            patching.mode_box.setCurrentIndex(index)
