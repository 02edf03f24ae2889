"""Screenshots of a long prompt: a SmolLM2-135M-shaped random model (30 layers, d_model 576, 9 query /
3 K/V heads, SwiGLU 1536, vocabulary 49,152, tied embeddings, 8192 positions), built in memory with a
stand-in word tokenizer (w0 w1 ...), random weights with every W_Q scaled by 6 (sharper heads than a
random model's near-uniform ones), and a 4096-token prompt. Writes, under --out:

* longprompt-WxH-attention-zoomed-out.png: the selected head, max-pooled to the view (no [n, n] built)
* longprompt-WxH-attention-zoomed-in.png: the same head zoomed in to ~160 tokens: exact tiles
* longprompt-WxH-lens.png: the residual panel's logit lens window around the selected token
* longprompt-WxH-attention-all-heads.png: back to the attention panel once the all-heads mosaic is
  computed (every head mean-pooled from q and k), when it is ready within --mosaic-wait seconds

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_longprompt.py --out docs
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshots import pump, settle  # noqa: E402


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
    parser.add_argument("--out", default="docs")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--layer", type=int, default=2)
    parser.add_argument("--head", type=int, default=4)
    parser.add_argument("--mosaic-wait", type=float, default=1500.0)
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    import numpy as np
    import torch
    from PySide6.QtCore import QSettings

    from explorer.ui.app import ensure_app
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app("light")
    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="shots-")) / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, device="cpu")
    window.resize(w, h)
    window.show()
    loaded = smollm2_135m_shaped()
    window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
    idle = lambda: window.trace is not None and not window.progressive.busy  # noqa: E731
    settle(app, 1.0)  # the sample prompt has no word of this vocabulary: nothing is traced yet
    # a prompt of random words that repeats itself: 512 words, eight times
    words = np.random.default_rng(0).integers(0, 49152, 512)
    text = " ".join(f"w{i}" for i in np.tile(words, args.tokens // 512 + 1)[:args.tokens])
    docks = {type(d.panel).__name__: d for d in window.docks}
    attention = docks["AttentionPanel"].panel
    docks["AttentionPanel"].raise_()
    window.session.selection.set_layer_head(args.layer, args.head)  # before the trace: its worker prepares the head
    start = time.perf_counter()
    print("tracing", args.tokens, "tokens", flush=True)
    window.set_prompt(text)
    pump(app, lambda: window.trace is not None and window.trace.n_tokens == args.tokens, timeout_s=3000)
    print(f"traced {window.trace.n_tokens} tokens in {time.perf_counter() - start:.0f} s", flush=True)
    window.session.selection.set_token(args.tokens - 200)
    detail = attention.long_detail
    pump(app, lambda: detail.trace is window.trace and (detail.layer, detail.head) == (args.layer, args.head)
         and detail.image.size > 0, timeout_s=3000)
    print(f"head drawn after {time.perf_counter() - start:.0f} s", flush=True)
    settle(app, 1.0)
    out = Path(args.out)
    path = out / f"longprompt-{w}x{h}-attention-zoomed-out.png"
    window.grab().save(str(path))
    print("wrote", path, "|", detail.plot.titleLabel.text, flush=True)
    q = args.tokens - 200  # zoomed in on the diagonal around the selected query: cells, and the mask
    detail.plot.setRange(xRange=(q - 40, q + 8), yRange=(q - 24, q + 24), padding=0)
    settle(app, 0.3)
    detail.refresh_tile()
    settle(app, 1.0)
    path = out / f"longprompt-{w}x{h}-attention-zoomed-in.png"
    window.grab().save(str(path))
    print("wrote", path, "| tile", detail.tile_rect, flush=True)
    residual = docks["ResidualPanel"]
    residual.raise_()
    pump(app, lambda: residual.panel.trace is window.trace and not residual.panel.computing(), timeout_s=3000)
    from PySide6.QtWidgets import QScrollArea

    area = residual.findChild(QScrollArea)
    if area is not None:  # the lens is the panel's last plot: scroll down to it
        area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())
    settle(app, 1.5)
    path = out / f"longprompt-{w}x{h}-lens.png"
    window.grab().save(str(path))
    print("wrote", path, flush=True)
    docks["AttentionPanel"].raise_()  # back, the all-heads mosaic computed (a panel behind a tab waits)
    detail.plot.setRange(xRange=(0, args.tokens), yRange=(0, args.tokens), padding=0)
    try:
        pump(app, lambda: attention.geometry is not None and not attention.computing(), timeout_s=args.mosaic_wait)
        settle(app, 1.0)
        path = out / f"longprompt-{w}x{h}-attention-all-heads.png"
        window.grab().save(str(path))
        print(f"wrote {path} after {time.perf_counter() - start:.0f} s", flush=True)
    except TimeoutError:
        print("the all-heads mosaic was not ready in time", flush=True)
    window.close()


if __name__ == "__main__":
    main()
