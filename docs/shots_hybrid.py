"""Screenshots of a hybrid model in the window (the real window under Xvfb): a Qwen3.5-0.8B-shaped random model with
4 layers (3 Gated DeltaNet, then gated attention: the release's layer pattern, cut; d_model 1024, DeltaNet 16 q/k and
16 v heads of 128, attention 8 / 2 K/V heads of 256 with rotary on a quarter and the output gate, SwiGLU 3584; shapes
from benchmarks/_hybrid_shapes.py), its config made by the qwen3_5_text family's own config function, random
weights (seed 0; unit-scale projections, the DeltaNet gates' parameters small, as the core tests draw them), the
vocabulary cut to GPT-2's 50,257 so the prompt is GPT-2's tokens (the layers, not the vocabulary, are what is shown).
Writes, under --out:

* hybrid-WxH-deltanet.png: the Attention panel on layer 0 (Gated DeltaNet), head 3: its effective attention, the
  all-heads grid beside it (recurrent layers' tiles: each row's shares of |weights|);
* hybrid-WxH-diagram.png: the Model diagram on layer 0: the DeltaNet layer's boxes (its scan, gates, output).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_hybrid.py --size 1280x800 --out docs
    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_hybrid.py --size 1600x1000 --out docs
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PROMPT = ("The cat sat on the mat because it was tired. The dog sat on the rug because it was cold. "
          "The cat sat on the mat")


def qwen35_shaped(layers: int = 4):
    """The Qwen3.5-0.8B shape cut to ``layers`` layers (the last attending), random weights, GPT-2's tokenizer."""
    import torch
    import transformers

    from _hybrid_shapes import hybrid_config
    from explorer.core.checkpoint import FAMILIES
    from explorer.core.checkpoint.loader import configure
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import gpt2_tokenizer

    config = hybrid_config(transformers, "qwen3.5-0.8b", layers, 2048)
    config.vocab_size = 50257
    _, cfg, _ = configure(FAMILIES[config.model_type], config.to_dict())
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.1 if name.endswith(("A_log", "dt_bias", "D")) else 1 / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if "norm" in name or "ln" in name else 0.0))
    return LoadedModel(model, gpt2_tokenizer(), f"Qwen3.5-0.8B-shaped, {layers} layers (random)", "docs", cfg.arch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.docks import dock_of

    loaded = qwen35_shaped()
    with screenshot_window(w, h, at_origin=True) as (app, window):
        out = Path(args.out)
        window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
        pump(app, lambda: complete(window))
        window.session.set_prompt(PROMPT)
        pump(app, lambda: complete(window) and window.trace is not None and window.trace.n_tokens > 20)
        n = window.trace.n_tokens

        def shot(panel_id: str, name: str, layer: int, head: int, token: int) -> None:
            panel = window.panel(panel_id)
            dock_of(panel).raise_()
            selection = window.session.selection
            selection.set_layer_head(layer, head)
            selection.set_token(token)
            settle(app, 0.3)
            pump(app, lambda: complete(window) and panel.trace is window.trace)
            settle(app, 0.8)
            path = out / f"hybrid-{w}x{h}-{name}.png"
            window.grab().save(str(path))
            print("wrote", path)

        shot("attention", "deltanet", 0, 3, n - 1)
        shot("diagram", "diagram", 0, 3, n - 1)


if __name__ == "__main__":
    main()
