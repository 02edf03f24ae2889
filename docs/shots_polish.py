"""Screenshots for issue 42's second half, on a laptop screen and a larger one: the window on a 30-layer model
(SmolLM2-135M's shape, random weights, a Q4_0 GGUF file as llama.cpp writes it: ``shots_reopen.py``'s), every
panel tab raised in turn, the logit lens with the token-across-layers chart, the learner views (Q, K and V as
matrices, the heads concatenated and projected by W_O, the KV cache of a generation) and the Journey.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1280x800x24" python docs/shots_polish.py --size 1280x800 --out docs
    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1600x1000x24" python docs/shots_polish.py --size 1600x1000 --out docs

Writes ``polish-WxH-<shot>.png`` under --out for the shots named by --panels (default: the ones the docs show:
lens-token, inside-qkv, inside-heads, inside-kvcache; also "tabs", any panel id, "patching", "journey"). Each wait
gives up after WAIT_S seconds with what it waited for.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshots import complete, pump, settle  # noqa: E402
from shots_reopen import CORRUPT, PROMPT, smollm_shaped_gguf  # noqa: E402

DEFAULT = ("lens", "learner", "kvcache")  # the shots the docs show; "tabs", any panel id or "journey" on request
WAIT_S = 240.0  # the longest one wait may take (each names what it waited for when it gives up)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--models", default=None, help="a folder for the GGUF file (kept between runs)")
    parser.add_argument("--panels", default=",".join(DEFAULT))
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    scratch = Path(tempfile.mkdtemp(prefix="shots-polish-"))
    try:
        shots(args, w, h, Path(args.out), smollm_shaped_gguf(Path(args.models) if args.models else scratch), scratch,
              args.panels.split(","))
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def shots(args, w: int, h: int, out: Path, gguf: Path, scratch: Path, wanted: list[str]) -> None:
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QGuiApplication

    from explorer.ui.app import ensure_app
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app("light")
    screen = QGuiApplication.primaryScreen().availableGeometry()
    assert (screen.width(), screen.height()) == (w, h), f"run it on a {w}x{h} X screen, not {screen}"
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, device="cpu")
    window.move(0, 0)
    window.show()
    window.open_checkpoint(str(gguf))
    wait(app, lambda: window.loaded is not None and window.loaded.config.n_layers == 30, "the GGUF file to load")
    window.set_prompt(PROMPT)
    wait(app, lambda: window.trace is not None and window.trace.config.n_layers == 30 and complete(window),
         "the prompt's trace on the 30-layer model")

    def grab(name: str) -> None:
        settle(app, 0.5)
        wait(app, lambda: complete(window), f"every panel drawn before the {name!r} shot")
        settle(app, 0.5)
        path = out / f"polish-{w}x{h}-{name}.png"
        QGuiApplication.primaryScreen().grabWindow(0).save(str(path))
        print("wrote", path)

    def raise_panel(panel_id: str):
        window.raise_panel(panel_id)
        panel = window.panel(panel_id)
        wait(app, lambda: panel is None or panel.trace is window.trace, f"the {panel_id!r} panel to show the trace")
        return panel

    # the shots of a generation last: the trace on screen after it is the prompt and the generated tokens
    for name in sorted(wanted, key=lambda shot: shot in ("journey", "kvcache")):
        if name == "tabs":
            raise_panel("tokens")
            grab("tabs")
        elif name == "lens":  # the lens enlarged, a cell clicked: its token across layers beside it
            panel = raise_panel("residual")
            panel.lens_big.setChecked(True)
            settle(app, 0.5)
            wait(app, lambda: complete(window), "the enlarged lens drawn")
            a, _b = panel.lens_view.shown
            panel.lens_map.cell_clicked.emit(20, panel.lens_view.shown[1] - a - 2)
            wait(app, lambda: panel.token_layers.path is not None and complete(window), "the token-across-layers chart")
            grab("lens-token")
            panel.lens_big.setChecked(False)
        elif name == "patching":  # an estimate of every cell, the largest listed beside the grids
            panel = raise_panel("patching")
            panel.corrupt_edit.setText(CORRUPT)
            # target and distractor left empty (the top prediction): on this byte-level vocabulary " John" is five
            # tokens, start() refuses it with a line in the status, and a wait for a result would never end
            panel.start()
            wait(app, lambda: panel.result is not None and panel.run_button.isEnabled() and complete(window),
                 "the patching estimate", lambda: panel.status.text())
            grab("patching")
        elif name == "learner":
            window.selection.set_layer_head(3, 2)
            panel = raise_panel("inside_attention")
            for index, shot in ((0, "inside-qkv"), (1, "inside-heads")):
                panel.tabs.setCurrentIndex(index)
                grab(shot)
        elif name in ("journey", "kvcache"):  # a generation of 6 tokens, its step 3 on screen
            if window.session.timeline.full is None:
                generate(app, window, 6)
                window.session.timeline.set_step(3)
                wait(app, lambda: window.session.timeline.step == 3 and complete(window), "step 3 of the generation")
            if name == "journey":
                window.dock("journey").raise_()
                grab("journey")
            else:
                window.selection.set_layer_head(3, 2)
                panel = raise_panel("inside_attention")
                panel.tabs.setCurrentIndex(2)
                grab("inside-kvcache")
        elif window.panel(name) is not None:
            raise_panel(name)
            grab(name)
    window.close()


def generate(app, window, n: int) -> None:
    """Generate ``n`` tokens greedily from the prompt and wait for the timeline's last step to be drawn."""
    pane = window.generation
    pane.controls.greedy.setChecked(True)
    pane.controls.max_new.setValue(n)
    pane.generate()
    wait(app, lambda: not pane.running and window.session.timeline.full is not None and complete(window),
         f"a generation of {n} tokens")


def wait(app, condition, what: str, detail=None) -> None:
    """``pump`` until ``condition()``, at most ``WAIT_S``; the error names what it waited for (and ``detail()``,
    e.g. the status line that says why it never came)."""
    try:
        pump(app, condition, WAIT_S, what)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}" + (f" (the panel says: {detail()!r})" if detail else "")) from None


if __name__ == "__main__":
    main()
