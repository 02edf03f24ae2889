"""Screenshots of the Model diagram panel and the tour (the real window under Xvfb, 1280×800):

* docs/diagram-1280x800-shakespeare.png: the bundled shakespeare model;
* docs/diagram-1280x800-llama.png: a Llama-shaped random model (32 layers, RMSNorm, rotary, 8 query / 2 K/V
  heads, gated SiLU FFN; GPT-2's tokenizer), built in memory;
* docs/tour-1280x800-{tokens,score,lens}.png: three steps of "Follow this token" on shakespeare.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_diagram.py --out docs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PROMPT = "To be, or not to be, that is the question:"


def llama_shaped():
    import torch

    from explorer.core.config import ModelConfig
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import gpt2_tokenizer

    cfg = ModelConfig(arch="llama", vocab_size=50257, n_ctx=2048, d_model=256, n_layers=32, n_heads=8, d_head=32,
                      d_ff=688, n_kv_heads=2, norm="rmsnorm", positions="rotary", rotary_base=500000.0,
                      activation="silu", gated_ffn=True, attn_bias=False, mlp_bias=False, tie_embeddings=True)
    torch.manual_seed(0)
    return LoadedModel(Transformer(cfg).eval(), gpt2_tokenizer(), "llama-shaped, 32 layers (random)", "docs", "llama")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from PySide6.QtGui import QGuiApplication

    from explorer.core.checkpoint import load_checkpoint
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.docks import dock_of

    with screenshot_window(w, h, at_origin=True) as (app, window):
        out = Path(args.out)
        diagram = window.panel("diagram")

        def show(loaded, layer: int, token: int) -> None:
            window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
            pump(app, lambda: complete(window))
            window.session.set_prompt(PROMPT)
            pump(app, lambda: complete(window) and window.trace.n_tokens > 1 and "".join(window.trace.tokens) == PROMPT)
            dock_of(diagram).raise_()
            window.session.selection.set_layer(layer)
            window.session.selection.set_head(1)
            window.session.selection.set_token(token)
            settle(app, 0.3)
            pump(app, lambda: complete(window) and diagram.view is not None and diagram.view.layer == layer)
            settle(app, 0.8)

        def screen(path: Path) -> None:
            frame = window.frameGeometry()
            QGuiApplication.primaryScreen().grabWindow(0, frame.x(), frame.y(), w, h).save(str(path))
            print("wrote", path)

        show(load_checkpoint("shakespeare", device="cpu"), 1, 6)
        window.grab().save(str(out / f"diagram-{w}x{h}-shakespeare.png"))
        print("wrote", out / f"diagram-{w}x{h}-shakespeare.png")
        diagram.open_tour()
        tour = diagram.tour
        pump(app, lambda: not tour.waiting)  # its steps are computed on the panel's lane
        tour.resize(640, 470)
        tour.move(w - 660, 225)  # below the tab bar: the Flow tab stays in sight
        for index, name in ((0, "tokens"), (4, "score"), (9, "lens")):
            tour.go(index)
            settle(app, 0.8)
            screen(out / f"tour-{w}x{h}-{name}.png")
        tour.close()
        show(llama_shaped(), 12, 6)
        window.grab().save(str(out / f"diagram-{w}x{h}-llama.png"))
        print("wrote", out / f"diagram-{w}x{h}-llama.png")

if __name__ == "__main__":
    main()
