"""Screenshots of a long prompt: a SmolLM2-135M-shaped random model (30 layers, d_model 576, 9 query /
3 K/V heads, SwiGLU 1536, vocabulary 49,152, tied embeddings, 8192 positions), built in memory with a
stand-in word tokenizer (w0 w1 ...), random weights with every W_Q scaled by 6 (sharper heads than a
random model's near-uniform ones), and a 4096-token prompt. Each shot is taken once every on-screen view
is complete (the progressive lane idle, no on-screen panel computing: no "computing..." in the picture).
Writes, under --out:

* longprompt-WxH-attention-zoomed-out.png: the selected head, max-pooled to the view (no [n, n] built),
  beside the all-heads mosaic (every head mean-pooled from q and k)
* longprompt-WxH-attention-zoomed-in.png: the same head zoomed in around the selected query: exact tiles,
  with the tooltip a hover shows there (the exact weight of one cell)
* longprompt-WxH-lens.png: the residual panel's logit lens window around the selected token
* longprompt-<--large>-attention-zoomed-out.png: the window resized to --large (default 1600x1000)

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_longprompt.py --out docs
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402


def smollm2_135m_shaped():
    """The model and a word tokenizer of its vocabulary, random weights (seed 0)."""
    import torch

    from explorer.core.config import ModelConfig
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import VocabTokenizer

    cfg = ModelConfig(arch="llama", vocab_size=49152, n_ctx=8192, d_model=576, n_layers=30, n_heads=9,
                      d_head=64, d_ff=1536, n_kv_heads=3, norm="rmsnorm", positions="rotary",
                      rotary_base=100000.0, activation="silu", gated_ffn=True, attn_bias=False, mlp_bias=False,
                      tie_embeddings=True)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # random heads attend almost uniformly; sharper queries give a picture with contrast
        for block in model.blocks:
            block.attn.W_Q.weight.mul_(6.0)
    words = [f"w{i}" for i in range(cfg.vocab_size)]
    return LoadedModel(model, VocabTokenizer(words, "words", "stand-in words"), "smollm2-135m-shaped (random)",
                       "screenshot", "llama")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--large", default="1600x1000", help="a second window size for the zoomed-out shot")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--layer", type=int, default=2)
    parser.add_argument("--head", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3000.0, help="seconds to wait for each view")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    import numpy as np
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QCursor, QPainter
    from PySide6.QtWidgets import QScrollArea, QToolTip

    from explorer.ui.session.workers import LoadRequest, LoadResult

    out = Path(args.out)
    start = time.perf_counter()
    with screenshot_window(w, h, at_origin=True) as (app, window):
        def done(extra=lambda: True) -> None:
            settle(app, 0.3)
            pump(app, lambda: complete(window) and extra(), timeout_s=args.timeout)
            settle(app, 1.0)
            pump(app, lambda: complete(window) and extra(), timeout_s=args.timeout)

        def shot(name: str, size: tuple[int, int]) -> None:
            path = out / f"longprompt-{size[0]}x{size[1]}-{name}.png"
            image = window.grab().toImage()
            tip = next((t for t in app.topLevelWidgets()
                        if t.metaObject().className() == "QTipLabel" and t.isVisible()), None)
            if tip is not None:  # a tooltip is a window of its own: painted where it shows over the main one
                painter = QPainter(image)
                painter.drawPixmap(tip.geometry().topLeft() - window.geometry().topLeft(), tip.grab())
                painter.end()
            image.save(str(path))
            print(f"wrote {path} after {time.perf_counter() - start:.0f} s", flush=True)

        loaded = smollm2_135m_shaped()
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        settle(app, 1.0)  # the sample prompt has no word of this vocabulary: nothing is traced yet
        # a prompt of random words that repeats itself: 512 words, eight times
        words = np.random.default_rng(0).integers(0, 49152, 512)
        text = " ".join(f"w{i}" for i in np.tile(words, args.tokens // 512 + 1)[:args.tokens])
        docks = {d.panel_id: d for d in window.docks}
        attention = docks["attention"].panel
        docks["attention"].raise_()
        window.session.selection.set_layer_head(args.layer, args.head)  # before the trace: its worker prepares it
        print("tracing", args.tokens, "tokens", flush=True)
        window.set_prompt(text)
        pump(app, lambda: window.trace is not None and window.trace.n_tokens == args.tokens, timeout_s=args.timeout)
        print(f"traced {window.trace.n_tokens} tokens in {time.perf_counter() - start:.0f} s", flush=True)
        q = args.tokens - 200
        window.session.selection.set_token(q)
        detail = attention.long_detail
        head_shown = lambda: (detail.trace is window.trace  # noqa: E731
                              and (detail.layer, detail.head) == (args.layer, args.head) and detail.image.size > 0)
        done(head_shown)
        print(f"every view complete after {time.perf_counter() - start:.0f} s |", detail.plot.titleLabel.text,
              flush=True)
        shot("attention-zoomed-out", (w, h))

        # zoomed in on the diagonal around the selected query: exact cells, the mask, one cell's tooltip
        detail.plot.setRange(xRange=(q - 40, q + 8), yRange=(q - 24, q + 24), padding=0)
        done(lambda: head_shown() and detail.tile_rect is not None)
        r0, _, c0, _ = detail.tile_rect  # hover the strongest exact cell below the selected row, left of the diagonal
        part = np.nan_to_num(detail.tile_values[q + 6 - r0:q + 22 - r0, q - 38 - c0:q - 12 - c0], nan=-1.0)
        dr, dc = np.unravel_index(int(part.argmax()), part.shape)
        row, col = q + 6 + int(dr), q - 38 + int(dc)
        scene = detail.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
        QCursor.setPos(detail.mapToGlobal(detail.mapFromScene(scene)))
        text_shown = detail.cell_text(row, col)
        settle(app, 0.5)  # the hover shows the same text; shown here too, in case the pointer did not move
        QToolTip.showText(QCursor.pos(), text_shown, detail)
        settle(app, 0.3)
        print("  tooltip shown:", QToolTip.isVisible(), repr(QToolTip.text()), flush=True)
        shot("attention-zoomed-in", (w, h))
        print("  tile", detail.tile_rect, "| tooltip:", text_shown, flush=True)
        QToolTip.hideText()

        residual = docks["residual"]
        residual.raise_()
        done(lambda: residual.panel.trace is window.trace)
        area = residual.findChild(QScrollArea)
        if area is not None:  # the lens is the panel's last plot: scroll down to it
            area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())
        done(lambda: residual.panel.trace is window.trace)
        shot("lens", (w, h))

        if args.large:
            large = tuple(int(x) for x in args.large.split("x"))
            window.resize(*large)
            docks["attention"].raise_()
            detail.plot.setRange(xRange=(0, args.tokens), yRange=(0, args.tokens), padding=0)
            done(lambda: head_shown() and detail.tile_rect is None)
            shot("attention-zoomed-out", large)


if __name__ == "__main__":
    main()
