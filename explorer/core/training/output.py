"""Where ``train`` writes, and with what seed: checked before anything is trained (issue 34).

``train`` overwrites the files of the checkpoint it writes (config.json, model.safetensors, the
tokenizer, README.md), so it writes only into a new or empty folder, or into one that an earlier
``train`` wrote: that folder holds our marker file, ``.explorer-train.json``, written before the
checkpoint's files. The app's own default folder (``user_data_dir()/models/NAME``) written by a
version before the marker counts as ours too. Anything else, a downloaded model's folder say, is
refused with one line and left exactly as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from explorer.core.arguments import whole
from explorer.core.errors import ExplorerError
from explorer.core.text import shown

MARKER = ".explorer-train.json"
MARKER_FORMAT = "transformer-explorer train output"
SEED_MAX = 2**32 - 1  # numpy's and torch's seeds both take it; the batches' Generator is seeded with it


class TrainOutputError(ExplorerError):
    """``--out`` (or ``--seed``) cannot be used: nothing was trained, nothing written."""


def checked_seed(seed: object) -> int:
    """``seed`` as a whole number from 0 to ``SEED_MAX``, else one line naming ``--seed``."""
    value = whole(seed, "--seed")
    if not 0 <= value <= SEED_MAX:
        raise TrainOutputError(f"--seed must be between 0 and {SEED_MAX} (got {shown(value, 40)}); "
                               "nothing was trained")
    return value


def is_train_output(folder: Path) -> bool:
    """Whether ``folder`` holds our marker (a regular file in our format, not a link)."""
    marker = folder / MARKER
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 4096:
            return False
        return json.loads(marker.read_text(encoding="utf-8")).get("format") == MARKER_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _legacy_default(folder: Path) -> bool:
    """The app's own default output folder, written by a version before the marker (a native checkpoint
    with its training record)."""
    from explorer.core.paths import user_data_dir

    if folder.resolve().parent != (user_data_dir() / "models").resolve():
        return False
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8")[:1 << 22])
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("format") == "transformer-explorer" and \
        isinstance(config.get("training"), dict)


def check_out(out: Path) -> None:
    """``out`` can take a trained checkpoint: neither it nor a folder above it is a file, and it is new,
    empty, or an earlier output of ``train``. Raises ``TrainOutputError`` (one line) otherwise."""
    out = Path(out).expanduser()
    for path in (out, *out.parents):
        if os.path.lexists(path) and not path.is_dir():
            raise TrainOutputError(f"--out {shown(out)}: {shown(path)} is a file, not a folder; nothing was trained")
        if path.exists():
            break
    if not out.is_dir():
        return
    try:
        empty = next(os.scandir(out), None) is None
    except OSError as exc:
        raise TrainOutputError(f"--out {shown(out)} cannot be read ({(exc.strerror or str(exc)).lower()}); "
                               "nothing was trained") from None
    if not empty and not is_train_output(out) and not _legacy_default(out):
        raise TrainOutputError(f"--out {shown(out)} is not empty and was not written by train (no {MARKER}): "
                               "nothing was trained; choose a new or empty folder")


def mark(out: Path, recipe: str) -> None:
    """Write our marker into ``out`` (before the checkpoint's files: a run stopped halfway is still ours)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text(json.dumps({"format": MARKER_FORMAT, "recipe": recipe}) + "\n", encoding="utf-8")
