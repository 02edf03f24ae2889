"""Screenshots of the QK/OV panel on the bundled induction model (the real window under Xvfb):

* docs/qkov-<size>-menu.png: the Attention panel's right-click menu on head 1.2's cell from the second ' sweet'
  to ' prince' (the token after the first ' sweet'), with "Why does it attend here?" and "What does it move?";
* docs/qkov-<size>-why.png: the answer to "Why does it attend here?": the score's terms (query parts x key
  parts), the largest ones ranked, the sum checked against the score;
* docs/qkov-<size>-what.png: "What does it move?" at the same query: each source's share of the output and its
  direct effect on the logit of ' prince', and the OV circuit copying each source's value.

``--model gpt2``: the same on a GPT-2-small-shaped random model (12 layers x 12 heads, GPT-2's vocabulary; each
block's heads as one part, the default for many heads), head 5.1 from the last token to ' Mary', written as
qkov-gpt2-<size>-*.png (a check of a real-size shape, not for the docs).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_qkov.py --size 1280x800 --out docs
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PROMPT = " Good night, sweet prince. Good night, sweet"
LAYER, HEAD = 1, 2  # the model card's induction head
GPT2_PROMPT = "When Mary and John went to the store, John gave a drink to"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--model", choices=("induction", "gpt2"), default="induction")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from PySide6.QtCore import QPointF, Qt, QTimer
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QMenu

    from explorer.ui.window.docks import dock_of

    out = Path(args.out)
    prefix, prompt, layer, head = "qkov", PROMPT, LAYER, HEAD
    with screenshot_window(w, h, at_origin=True) as (app, window):
        if args.model == "gpt2":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
            from _models import gpt2_small_loaded

            from explorer.ui.session.workers import LoadRequest, LoadResult

            window.session.use_model(LoadResult(LoadRequest(None, "cpu"), gpt2_small_loaded(), None))
            prefix, prompt, layer, head = "qkov-gpt2", GPT2_PROMPT, 5, 1
        else:
            window.open_checkpoint("induction")
        pump(app, lambda: complete(window) and window.loaded is not None)
        window.session.set_prompt(prompt)
        pump(app, lambda: complete(window) and "".join(window.trace.tokens) == prompt)
        tokens = window.trace.tokens
        query = len(tokens) - 1                                     # the second ' sweet' (gpt2: ' to')
        key = tokens.index(tokens[query]) + 1 if args.model != "gpt2" else tokens.index(" Mary")
        attention = window.panel("attention")                      # (' prince', after the first ' sweet')
        dock_of(attention).raise_()
        window.session.selection.set_layer_head(layer, head)
        window.session.selection.set_token(query)
        pump(app, lambda: complete(window) and not attention.redraw_pending)
        settle(app, 0.8)

        def screen(path: Path) -> None:
            frame = window.frameGeometry()
            QGuiApplication.primaryScreen().grabWindow(0, frame.x(), frame.y(), w, h).save(str(path))
            print("wrote", path)

        # a real right-click on the cell; the screen grabbed while its menu is open, then "Why…" chosen
        view = attention.detail
        scene = view.plot.vb.mapViewToScene(QPointF(key + 0.5, query + 0.5))
        point = view.viewport().mapTo(window, view.mapFromScene(scene))
        chosen = {}

        def in_menu() -> None:
            menu = QApplication.activePopupWidget()
            if not isinstance(menu, QMenu) or not menu.isVisible():
                QTimer.singleShot(30, in_menu)
                return
            settle(app, 0.4)
            screen(out / f"{prefix}-{w}x{h}-menu.png")
            action = next(a for a in menu.actions() if a.text().startswith("Why does it attend"))
            menu.close()
            chosen["at"] = time.perf_counter()
            action.trigger()
            chosen["done"] = True

        QTimer.singleShot(0, in_menu)
        handle = window.windowHandle()
        QTest.mousePress(handle, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, point)
        QTest.mouseRelease(handle, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, point)
        pump(app, lambda: chosen.get("done", False))
        panel = window.panel("qkov")
        pump(app, lambda: complete(window) and panel.answer is not None)
        print(f"answered 'why' in {time.perf_counter() - chosen['at']:.2f} s (the window idle again)")
        settle(app, 0.8)
        window.grab().save(str(out / f"{prefix}-{w}x{h}-why.png"))
        print("wrote", out / f"{prefix}-{w}x{h}-why.png")

        panel.ov.copy.setCurrentIndex(panel.ov.copy.findData("value"))  # the copy this model really makes
        asked = time.perf_counter()
        panel.set_kind("ov")
        pump(app, lambda: complete(window) and panel.answer is not None and panel.question.kind == "ov")
        print(f"answered 'what' in {time.perf_counter() - asked:.2f} s")
        settle(app, 0.8)
        window.grab().save(str(out / f"{prefix}-{w}x{h}-what.png"))
        print("wrote", out / f"{prefix}-{w}x{h}-what.png")


if __name__ == "__main__":
    main()
