"""File ▸ Export as script: a short Python script, using ``explorer.core``, that recomputes what the window
shows and prints the same numbers.

``script_for(state, ...)`` turns a ``SessionState`` (``core/session_file.py``: the model, the token ids, the
interventions switched on, the selection, the panels' settings) into the script's text. It loads the model
as the window did (the same source, device and precision; it warns when the files' SHA-256 is not the one
exported), traces the same ids with the same interventions, and prints

* the selected head's attention pattern (rows: query tokens, columns: key tokens);
* the direct logit attribution the Logit attribution panel shows (its position, target and distractor);
* the activation patching grids, when the patching panel holds one (exact, or attribution patching's
  estimate, as shown), recomputed from its corrupted prompt, target and distractor.

Every value is printed with 9 significant digits (a float32 exactly) by ``show``, one matrix row a line, so
the script's output can be read by eye or compared by a program. Everything from the session is written
as a Python literal (``repr``), so no text in a session can become code in the script.
"""

from __future__ import annotations

import datetime
from typing import Any

from explorer.core.session_file import SessionState

SHOW = '''def show(title, matrix, rows=None, columns=None):
    """Print a matrix one row a line, 9 significant digits (a float32 exactly)."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    print(f"== {title}")
    if columns is not None:
        print("columns: " + " | ".join(columns))
    for i, row in enumerate(matrix):
        label = rows[i] if rows is not None else str(i)
        print(f"{label}: " + " ".join(f"{value:.9g}" for value in row))
'''


def _intervention_code(record: dict[str, Any]) -> str:
    """One ``Intervention(...)`` expression (a feature's SAE and a steering vector by name), defaults left out."""
    args = [repr(record["target"]), repr(int(record["layer"])), repr(record.get("index"))]
    if record.get("mode", "zero") != "zero":
        args.append(f"mode={record['mode']!r}")
    if record.get("positions") is not None:
        args.append(f"positions={tuple(int(p) for p in record['positions'])!r}")
    if record["target"] == "feature":
        args.append(f"value=saes[{record['sae']!r}]")
    elif record["target"] == "steer":
        args.append(f"value=np.array({[float(v) for v in record['vector']]!r}, dtype=np.float32)")
    if record.get("amount") is not None:
        args.append(f"amount={float(record['amount'])!r}")
    if record.get("source") is not None:
        args.append(f"source={record['source']!r}")
    return f"Intervention({', '.join(args)})"


def script_for(state: SessionState, app_version: str = "", file_name: str = "explorer_script.py") -> str:
    """The script's text (see the module docstring)."""
    on = [r for r in state.interventions if r.get("enabled", True) and r.get("mode") != "patch"]
    saes = sorted({str(r["sae"]) for r in on if r.get("target") == "feature"})
    digest = state.fingerprint.digest if state.fingerprint is not None else None
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "#!/usr/bin/env python3",
        f'"""Recompute what Transformer Explorer showed, with explorer.core (exported {when}'
        + (f" by Transformer Explorer {app_version}" if app_version else "") + ").",
        "",
        f"Model: {state.source!r} ({state.dtype} on {state.device}).",
        f"Run it where transformer-explorer is installed: python {file_name}",
        '"""',
        "",
        "import numpy as np",
        "",
        "from explorer.core.checkpoint import load_checkpoint",
        "from explorer.core.display.labels import token_labels",
        "from explorer.core.interventions.spec import Intervention",
        "from explorer.core.model_files import fingerprint",
        "",
        f"SOURCE = {state.source!r}",
        f"EXPORTED_SHA256 = {digest!r}  # the SHA-256 of the model's files when this was exported",
        "",
        SHOW,
        f"loaded = load_checkpoint(SOURCE, device={state.device!r}, dtype={state.dtype!r})",
        "files = fingerprint(SOURCE)",
        "if EXPORTED_SHA256 is not None and (files is None or files.digest != EXPORTED_SHA256):",
        '    print("warning: the model\'s files changed since this script was exported: other numbers follow")',
        "",
        f"PROMPT = {state.prompt!r}",
        f"ids = {[int(i) for i in state.token_ids]!r}" if state.token_ids else "ids, _ = loaded.encode(PROMPT)",
    ]
    if saes:
        lines += ["", "from explorer.core.features.sae import open_sae", "",
                  "saes = {path: open_sae(path, loaded.config, loaded.name) for path in " + repr(saes) + "}"]
    lines += ["", "# the interventions switched on in the window"]
    if on:
        lines += ["interventions = ["] + [f"    {_intervention_code(r)}," for r in on] + ["]"]
    else:
        lines += ["interventions = []"]
    skipped = sum(1 for r in state.interventions if r.get("enabled", True) and r.get("mode") == "patch")
    if skipped:
        lines += [f"# ({skipped} patch from another run is not reproduced here: its values come from that run)"]
    lines += ["trace = loaded.trace_ids(ids, interventions=interventions)", "tokens = token_labels(trace.tokens)", ""]
    lines += _pattern(state) + _dla(state) + _patching(state)
    return "\n".join(lines).rstrip() + "\n"


def _pattern(state: SessionState) -> list[str]:
    layer, head = int(state.selection.get("layer") or 0), int(state.selection.get("head") or 0)
    return [f"# the selected head: layer {layer}, head {head} (rows: query tokens, columns: key tokens)",
            f"show('attention pattern, layer {layer} head {head}', trace.head({layer}, {head}, 'pattern'), tokens, tokens)",
            ""]


def _dla(state: SessionState) -> list[str]:
    dla = state.panels.get("dla") or {}
    if not isinstance(dla.get("target"), int):
        return []
    position, target, distractor = int(dla.get("position") or 0), int(dla["target"]), dla.get("distractor")
    distractor = None if distractor is None else int(distractor)
    return ["# direct logit attribution (the Logit attribution panel): what each head and FFN adds to the logit",
            f"# of token {target}" + (f" minus token {distractor}" if distractor is not None else "")
            + f" at position {position}",
            "from explorer.core.analysis.dla import DLAError, direct_logit_attribution",
            "",
            "try:",
            f"    dla = direct_logit_attribution(trace, {target}, {position}, {distractor!r})",
            "except DLAError as exc:  # the panel says the same (a steered stream, a post-norm model)",
            "    print(f'direct logit attribution: {exc}')",
            "else:",
            "    columns = [f'H{h}' for h in range(trace.config.n_heads)]",
            "    grid = dla.heads",
            "    if trace.config.has_ffn:",
            "        grid, columns = np.concatenate([dla.heads, dla.mlp[:, None]], axis=1), columns + ['FFN']",
            "    show('direct logit attribution', grid, [f'L{layer}' for layer in range(trace.config.n_layers)], columns)",
            "    print(f'logit: {dla.logit:.9g}')",
            ""]


def _patching(state: SessionState) -> list[str]:
    patching = state.panels.get("patching") or {}
    mode = patching.get("mode")
    if mode not in ("exact", "estimate") or not patching.get("corrupted"):
        return []
    call = ("attribution_patching(loaded.model, ids, corrupt, target, distractor)" if mode == "estimate" else
            "activation_patching(loaded.model, ids, corrupt, target, distractor, batch_size=16)")
    module = "attribution" if mode == "estimate" else "patching"
    what = "attribution patching's estimate" if mode == "estimate" else "exact"
    return [f"# activation patching (the patching panel, {what}): the share of the logit difference restored",
            "# by patching each clean activation into the corrupted run",
            f"from explorer.core.interventions.{module} import {call.split('(')[0]}",
            "",
            f"CORRUPTED = {patching['corrupted']!r}",
            "corrupt, _ = loaded.encode(CORRUPTED)",
            "clean = loaded.trace_ids(ids)  # the clean run (patching starts from the run without interventions)",
            "",
            "def one_token(text):",
            "    found = loaded.tokenizer.encode(text)",
            "    assert len(found) == 1, f'{text!r} is {len(found)} tokens, not one'",
            "    return found[0]",
            "",
            f"target = one_token({patching.get('target')!r})" if patching.get("target") else
            "target = int(np.argmax(clean['logits'][-1]))  # the clean run's top prediction",
            f"distractor = one_token({patching.get('distractor')!r})" if patching.get("distractor") else
            "distractor = None",
            f"result = {call}",
            "show('activation patching, residual stream', result.resid,"
            " [f'L{layer}' for layer in range(trace.config.n_layers)] + ['final'], tokens)",
            "show('activation patching, heads', result.heads, [f'L{layer}' for layer in range(trace.config.n_layers)],"
            " [f'H{h}' for h in range(trace.config.n_heads)])",
            "print(f'clean {result.clean_metric:.9g}, corrupted {result.corrupt_metric:.9g}')",
            ""]
