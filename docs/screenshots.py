"""Take the README's window screenshots: the real window under an X server (Xvfb), a GPT-2-small-shaped
random model (or the bundled default), each panel raised in turn, the whole window grabbed to a PNG.

    xvfb-run -s "-screen 0 1920x1200x24" python docs/screenshots.py --size 1280x800 --out docs
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


NAMES = {"TokenizationPanel": "tokenization", "EmbeddingsPanel": "embeddings", "AttentionPanel": "attention",
         "NeuronsPanel": "neurons", "ResidualPanel": "residual", "WhatChangedPanel": "what-changed",
         "DLAPanel": "dla", "PatchingPanel": "patching", "MaskedTokensPanel": "masked"}


def pump(app, condition, timeout_s=900.0):
    deadline = time.perf_counter() + timeout_s
    while not condition():
        app.processEvents()
        if time.perf_counter() > deadline:
            raise TimeoutError("the window did not finish in time")
        time.sleep(0.005)


def settle(app, seconds=0.6):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--model", choices=["gpt2", "default"], default="gpt2")
    parser.add_argument("--prefix", default="laptop")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from PySide6.QtCore import QSettings

    from explorer.ui.app import ensure_app
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app("light")
    import tempfile

    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="shots-")) / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, device="cpu")
    window.resize(w, h)
    window.show()
    if args.model == "gpt2":
        from _models import gpt2_small_loaded

        loaded = gpt2_small_loaded()
    else:
        from explorer.core.checkpoint import load_checkpoint

        loaded = load_checkpoint(device="cpu")
    window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
    complete = lambda: (window.trace is not None and not window.progressive.busy  # noqa: E731
                        and not any(p.computing() for p in window.panels if p.on_screen))
    pump(app, complete)
    settle(app)
    out = Path(args.out)
    for dock in window.docks:
        if dock.isHidden():
            continue  # a panel that does not apply to this model
        dock.raise_()
        settle(app, 0.3)
        pump(app, complete)
        settle(app, 0.8)
        name = NAMES.get(type(dock.panel).__name__, type(dock.panel).__name__.lower())
        path = out / f"{args.prefix}-{w}x{h}-{name}.png"
        window.grab().save(str(path))
        print("wrote", path)
    window.close()


if __name__ == "__main__":
    main()
