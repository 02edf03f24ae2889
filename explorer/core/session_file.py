"""A saved session: what the window showed, as a small JSON file that reopens exactly.

It holds the model (where it was opened from, its precision and device, and the SHA-256 of its files:
``model_files.Fingerprint``), the prompt (or a conversation of ``{role, content}`` turns) and the exact
token ids traced, the selection (layer, head, token, generation step), the interventions (each on or off;
a steering vector's numbers; a feature's SAE by its folder), the SAEs open, the feature selected, the
steering and sampling settings with the seed, small per-panel settings (the DLA's target, the patching
panel's prompts) and the window's layout (an opaque base64 blob the UI gives).

Reading is bounded and strict: at most ``MAX_BYTES``, JSON without NaN, every field checked for its type
and size; a file that is not a session, or is damaged or hostile, is one line (``SessionFileError``).
A session never holds code, pickles or paths it would run. ``model_changed`` compares the saved
fingerprint with the files as they are now and names the file that changed, so the window can say
"the model file changed since this session was saved" instead of showing other numbers.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.interventions.spec import Intervention, InterventionError
from explorer.core.model_files import Fingerprint, changed_files, fingerprint, fingerprint_from
from explorer.core.text import MESSAGE_LIMIT, shown

FORMAT = "transformer-explorer session"
VERSION = 1
SUFFIX = ".explorer-session.json"
MAX_BYTES = 16 << 20       # steering vectors (d_model floats each) and a layout blob fit easily
MAX_TEXT = 4 << 20         # a prompt or a conversation turn
MAX_ITEMS = 1 << 16        # token ids, interventions, turns, vector entries
MAX_DEPTH = 12             # nesting of the JSON (a hostile file nests thousands deep)


class SessionFileError(ExplorerError):
    """A session file that cannot be read (not one, damaged, from a newer version, too large)."""


@dataclass(frozen=True)
class SessionState:
    """What a session file holds (see the module docstring); JSON-safe values only."""

    source: str                                   # the model: a path, a built-in name, an org/name id
    prompt: str
    device: str = "auto"
    dtype: str = "float32"
    model_name: str = ""
    fingerprint: Fingerprint | None = None
    conversation: list[dict[str, str]] | None = None
    token_ids: list[int] | None = None            # the ids traced, when they are not the prompt's encoding
    selection: dict[str, int | None] = field(default_factory=dict)   # layer, head, token, step
    interventions: list[dict[str, Any]] = field(default_factory=list)  # intervention_record()s + "enabled"
    saes: list[str] = field(default_factory=list)  # SAE folders, opened for the model
    feature: dict[str, Any] | None = None          # {"sae": folder, "index": n}: the feature selected
    steering: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    panels: dict[str, dict[str, Any]] = field(default_factory=dict)  # small per-panel settings
    layout: str | None = None                      # base64 of the window's saved state (opaque here)
    saved_by: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["fingerprint"] = self.fingerprint.to_dict() if self.fingerprint is not None else None
        return json.dumps({"format": FORMAT, "version": VERSION, **data}, indent=1, ensure_ascii=False,
                          allow_nan=False)


# --- interventions as records -----------------------------------------------------------------------

def intervention_record(iv: Intervention) -> dict[str, Any] | None:
    """``iv`` as JSON: its description, a steering vector's numbers, a feature's SAE folder; None for what
    cannot be kept (a patch carries another run's activations)."""
    if iv.mode == "patch":
        return None
    out = iv.describe()
    if iv.target == "steer":
        import numpy as np

        out["vector"] = [float(v) for v in np.asarray(iv.value, dtype=np.float64).ravel()]
    elif iv.target == "feature":
        out["sae"] = str(iv.value.path)
    elif iv.mode == "mean":
        out.pop("value", None)  # resolved again from the run without interventions
    return out


def intervention_from(record: dict[str, Any], saes: dict[str, Any] | None = None) -> Intervention:
    """The ``Intervention`` of a record (``saes``: the opened SAEs by folder, for features)."""
    import numpy as np

    value = None
    if record.get("target") == "steer":
        value = np.asarray(record.get("vector", []), dtype=np.float32)
    elif record.get("target") == "feature":
        value = (saes or {}).get(str(record.get("sae")))
        if value is None:
            raise InterventionError(f"the SAE {shown(record.get('sae'))} of feature {record.get('index')} is not open")
    positions = record.get("positions")
    return Intervention(str(record.get("target")), int(record.get("layer", -1)), record.get("index"),
                        str(record.get("mode", "zero")), None if positions is None else tuple(positions), value,
                        record.get("amount"), record.get("source"))


# --- writing and reading ------------------------------------------------------------------------------

def save(state: SessionState, target: str | os.PathLike[str]) -> Path:
    """Write ``state`` to ``target`` atomically (an existing file is replaced only once the new one is whole)."""
    from explorer.core.export import write_text

    write_text(target, state.to_json() + "\n")
    return Path(target)


def _fail(path: Path, what: str) -> SessionFileError:
    return SessionFileError(shown(f"{path.name}: {what}", MESSAGE_LIMIT))


def _depth(value: Any, limit: int) -> int:
    stack, deepest = [(value, 1)], 1
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _nan(text: str) -> None:
    raise ValueError(f"{text} is not a number JSON allows")


class _Fields:
    """Typed reads of the top-level object, each failure one line naming the field."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.data, self.path = data, path

    def get(self, key: str, kinds: type | tuple[type, ...], default: Any = None, size: int | None = None) -> Any:
        value = self.data.get(key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
            raise _fail(self.path, f"{key} should be {_names(kinds)}, not a boolean")
        if not isinstance(value, kinds):
            raise _fail(self.path, f"{key} should be {_names(kinds)}, not {type(value).__name__}")
        if size is not None and len(value) > size:
            raise _fail(self.path, f"{key} is too long ({len(value)} > {size})")
        return value


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))


def read(path: str | os.PathLike[str]) -> SessionState:
    """The session in ``path``, checked (see the module docstring); ``SessionFileError`` with one line if not."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _fail(path, f"cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise _fail(path, f"larger than a session file can be ({MAX_BYTES >> 20} MB)")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_nan)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(path, f"not a session file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _fail(path, "not a Transformer Explorer session (no 'format' saying so)")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(path, f"its version {shown(version, 20)} is not one this app writes")
    if version > VERSION:
        raise _fail(path, f"saved by a newer Transformer Explorer (session version {version}; this one reads {VERSION})")
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise _fail(path, "nested too deeply to be a session")
    return _state(_Fields(data, path))


def _state(f: _Fields) -> SessionState:
    path = f.path
    source = f.get("source", str, size=4096)
    if not source:
        raise _fail(path, "it names no model (source)")
    ids = f.get("token_ids", list, size=MAX_ITEMS)
    if ids is not None and not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise _fail(path, "token_ids should be whole numbers")
    conversation = f.get("conversation", list, size=MAX_ITEMS)
    if conversation is not None and not all(isinstance(t, dict) and isinstance(t.get("role"), str)
                                            and isinstance(t.get("content"), str) for t in conversation):
        raise _fail(path, "conversation should be a list of {role, content} turns")
    selection = f.get("selection", dict, {})
    for key, value in selection.items():
        if key not in ("layer", "head", "token", "step") or not (value is None or isinstance(value, int)
                                                                  and not isinstance(value, bool) and value >= 0):
            raise _fail(path, f"selection.{shown(key, 20)} should be a whole number")
    interventions = f.get("interventions", list, [], size=MAX_ITEMS)
    for i, record in enumerate(interventions):
        _check_intervention(path, i, record)
    saes = f.get("saes", list, [], size=256)
    if not all(isinstance(s, str) and len(s) <= 4096 for s in saes):
        raise _fail(path, "saes should be folder names")
    feature = f.get("feature", dict)
    if feature is not None and not (isinstance(feature.get("sae"), str) and isinstance(feature.get("index"), int)):
        raise _fail(path, "feature should be {sae, index}")
    known = f.data.get("fingerprint")
    print_ = fingerprint_from(known) if known is not None else None
    if known is not None and print_ is None:
        raise _fail(path, "its model fingerprint is damaged")
    layout = f.get("layout", str, size=MAX_BYTES)
    return SessionState(
        source=source, prompt=f.get("prompt", str, "", size=MAX_TEXT), device=f.get("device", str, "auto", size=40),
        dtype=f.get("dtype", str, "float32", size=40), model_name=f.get("model_name", str, "", size=4096),
        fingerprint=print_, conversation=conversation, token_ids=ids, selection=selection,
        interventions=interventions, saes=saes, feature=feature, steering=_flat(f, "steering"),
        sampling=_flat(f, "sampling"), panels={k: _flat(_Fields(f.data.get("panels", {}), path), k)
                                               for k in f.get("panels", dict, {}, size=64)},
        layout=layout, saved_by=f.get("saved_by", str, "", size=200))


def _flat(f: _Fields, key: str) -> dict[str, Any]:
    """A small settings object: names to numbers, strings, booleans or None (nothing nested)."""
    value = f.get(key, dict, {}, size=256)
    for name, item in value.items():
        if not (item is None or isinstance(item, (bool, int, float, str)) or
                isinstance(item, list) and len(item) <= MAX_ITEMS and all(isinstance(i, int) for i in item)):
            raise _fail(f.path, f"{key}.{shown(name, 40)} should be a number, a string or a list of whole numbers")
        if isinstance(item, str) and len(item) > MAX_TEXT:
            raise _fail(f.path, f"{key}.{shown(name, 40)} is too long")
    return value


def _check_intervention(path: Path, i: int, record: Any) -> None:
    if not isinstance(record, dict):
        raise _fail(path, f"intervention {i} should be an object")
    whole = {"layer": False, "index": True}  # name -> may be None
    for name, optional in whole.items():
        value = record.get(name)
        if not (value is None and optional or isinstance(value, int) and not isinstance(value, bool)):
            raise _fail(path, f"intervention {i}'s {name} should be a whole number")
    positions, amount = record.get("positions"), record.get("amount")
    if positions is not None and not (isinstance(positions, list) and len(positions) <= MAX_ITEMS and all(
            isinstance(p, int) and not isinstance(p, bool) for p in positions)):
        raise _fail(path, f"intervention {i}'s positions should be whole numbers")
    if amount is not None and (isinstance(amount, bool) or not isinstance(amount, (int, float))):
        raise _fail(path, f"intervention {i}'s amount should be a number")
    if not isinstance(record.get("source"), (str, type(None))) or not isinstance(record.get("enabled", True), bool):
        raise _fail(path, f"intervention {i}'s source should be text and enabled a boolean")
    vector = record.get("vector")
    if vector is not None and not (isinstance(vector, list) and len(vector) <= MAX_ITEMS
                                   and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector)):
        raise _fail(path, f"intervention {i}'s vector should be numbers")
    try:  # the same checks as any intervention (target, mode, index, amount), with a stand-in for an SAE
        stand_in = {str(record.get("sae")): _StandInSAE()} if record.get("target") == "feature" else None
        intervention_from(record, stand_in)
    except (InterventionError, TypeError, ValueError) as exc:
        raise _fail(path, f"intervention {i}: {exc}") from None


class _StandInSAE:
    path = Path("")


# --- the model, then and now --------------------------------------------------------------------------

def model_changed(state: SessionState, progress: Any = None, cancel: Any = None) -> str | None:
    """None when ``state``'s model files are the ones saved (by content); else one line saying what changed."""
    if state.fingerprint is None:
        return None  # a model without files (built into the app): nothing to compare
    now = fingerprint(state.source, progress=progress, cancel=cancel, known=state.fingerprint)
    changed = changed_files(state.fingerprint, now)
    if not changed:
        return None
    if now is None:
        return f"the model's files are no longer at {shown(state.source)}: this session cannot be reopened as saved"
    names = ", ".join(shown(n, 60) for n in changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    return (f"the model file changed since this session was saved ({names} in {shown(state.source)}): "
            "its numbers would not be the session's")
