"""Screenshots of the generation timeline, the journey view, a comparison and the verify table (issue 24).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_timeline.py --out docs

* timeline-1280x800-midgeneration.png: the bundled shakespeare model while a 48-token generation is
  still running: 20 tokens so far, the user stepped back to step 10 ("paused at 10": the panels show the
  trace of the prompt + 10 tokens, traced on its own) while tokens kept coming. The bundled model makes
  hundreds of tokens a second, so the script lets the generation's steps through a gate (``--only``:
  ``timeline`` stops after the timeline's two pictures);
* timeline-1280x800-journey.png: the journey of the token produced at that step, once the generation
  ended (from the one trace of the whole sequence, the step unchanged);
* compare-1280x800-finetuned.png: the shakespeare model against a copy trained 40 more steps on a
  short passage (done here, into a temporary folder; nothing is written into models/);
* verify-1280x800-table.png: Help > Verify this model on a small GPT-2 checkpoint written with
  transformers' save_pretrained into a temporary folder (random weights, a word-level tokenizer).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from screenshots import open_window, pump, settle  # noqa: E402

# public-domain lines (Hamlet, Act 3), the few-step fine-tune's text
PASSAGE = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
           "and arrows of outrageous fortune, or to take arms against a sea of troubles, and by opposing end "
           "them. To die, to sleep; no more; and by a sleep to say we end the heart-ache and the thousand "
           "natural shocks that flesh is heir to. ")


def fine_tuned_copy(directory: Path, steps: int = 40) -> Path:
    """The shakespeare model trained ``steps`` more steps on PASSAGE (AdamW, the loop's loss), saved natively."""
    import numpy as np
    import torch

    from explorer.core.checkpoint import load_checkpoint, save_native
    from explorer.core.training.loop import random_windows, token_losses

    loaded = load_checkpoint("shakespeare", device="cpu")
    model = loaded.model.train()
    tokens = np.asarray(loaded.tokenizer.encode(PASSAGE * 4), dtype=np.int64)
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    for _ in range(steps):
        batch = random_windows(tokens, 48, 8, rng)
        loss = token_losses(model, batch).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    out = directory / "shakespeare-finetuned"
    save_native(model, loaded.tokenizer, out, name="shakespeare +40 steps")
    return out


def hf_gpt2(directory: Path) -> Path:
    """A small GPT-2 saved by transformers (random weights) beside a word-level tokenizer both sides read."""
    import tokenizers
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=100, n_positions=64, n_embd=64, n_layer=6, n_head=4)
    path = directory / "tiny-gpt2"
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(path)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(100)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                            "unk_token": "w0"}))
    return path


def gate_generation() -> threading.Semaphore:
    """The generation's steps wait for the returned semaphore (one release per step), so that the picture
    can be taken while the generation's worker still runs."""
    import explorer.core.generation.generate as generate
    import explorer.ui.generation.stream as stream

    real, tokens = generate.generate_steps, threading.Semaphore(0)
    stream.FRAME_MS = 0  # each step reaches the window on its own (not held for a frame behind the gate)

    def gated_steps(*args, **kwargs):
        steps = real(*args, **kwargs)
        while True:
            tokens.acquire()
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            yield step

    generate.generate_steps = gated_steps
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--only", choices=("all", "timeline"), default="all")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    out = Path(args.out)

    from PySide6.QtCore import Qt

    from explorer.ui.panels.attention import AttentionPanel
    from explorer.ui.panels.journey import JourneyPanel
    from explorer.ui.window.docks import dock_of
    from explorer.ui.window.verify_dialog import VerifyDialog

    tmp = Path(tempfile.mkdtemp(prefix="shots-s24-"))
    app, window = open_window(w, h, folder=tmp)

    def complete() -> bool:
        return window.trace is not None and window.presenter.is_idle()

    def shot(name: str) -> None:
        settle(app, 0.4)
        pump(app, complete)
        settle(app, 0.8)
        path = out / name
        window.grab().save(str(path))
        print("wrote", path)

    window.open_checkpoint("shakespeare")
    pump(app, lambda: window.loaded is not None and complete())
    window.set_prompt("To be, or not to be")
    pump(app, lambda: window.trace is not None and window.trace.n_tokens < 12 and complete())
    pane = window.generation
    pane.greedy.setChecked(False)
    pane.temperature.setValue(0.8)
    pane.top_k.setValue(40)
    pane.random_seed.setChecked(False)
    pane.seed.setValue(7)
    pane.max_new.setValue(48)
    pane.stop_at_eos = False
    timeline, bar = window.session.timeline, window.timeline_bar
    tokens = gate_generation()
    attention = next(p for p in window.panels if isinstance(p, AttentionPanel))
    dock_of(attention).raise_()
    for _ in range(14):
        tokens.release()
    pane.generate()
    pump(app, lambda: timeline.total == 14 and timeline.waiting is None
         and window.trace.n_tokens == timeline.n_prompt + 14 and complete())
    bar.slider.setValue(10)  # the user steps back while it generates
    pump(app, lambda: timeline.waiting is None and window.trace.n_tokens == timeline.n_prompt + 10 and complete())
    for _ in range(6):  # tokens keep coming: the range grows, the step stays
        tokens.release()
    pump(app, lambda: timeline.total == 20 and bar.slider.maximum() == 20 and complete())
    assert pane.running and timeline.streaming and timeline.step == 10, "the generation should still be running"
    shot(f"timeline-{w}x{h}-midgeneration.png")
    for _ in range(100):
        tokens.release()
    pump(app, lambda: not pane.running and timeline.full is not None and timeline.step == 10
         and window.trace.n_tokens == timeline.n_prompt + 10 and complete())
    journey = next(p for p in window.panels if isinstance(p, JourneyPanel))
    dock_of(journey).raise_()  # a tab beside the generation pane: widened for the picture
    window.resizeDocks([dock_of(journey)], [int(w * 0.58)], Qt.Orientation.Horizontal)
    pump(app, lambda: journey.view is not None and journey.view.journey is not None)
    shot(f"timeline-{w}x{h}-journey.png")
    if args.only == "timeline":
        window.close()
        return
    window.generation_dock.raise_()

    timeline.stop()
    window.generation_dock.hide()
    dock_of(journey).hide()
    copy = fine_tuned_copy(tmp)
    window.set_prompt("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer")
    pump(app, lambda: window.trace is not None and window.trace.n_tokens > 12 and complete())
    compare = window.session.compare
    compare.open(str(copy))
    pump(app, lambda: window.compare_dock.view.result is not None and window.compare_dock.view.dist.rowCount() > 0)
    residual = window.panel("residual")
    dock_of(residual).raise_()
    window.resizeDocks([window.compare_dock], [int(w * 0.62)], Qt.Orientation.Horizontal)
    view = window.compare_dock.view
    view.cos.cell_clicked.emit(2, 12)
    pump(app, lambda: view._shown_key == (id(view.result), 12) and view.dist.rowCount() > 0)
    shot(f"compare-{w}x{h}-finetuned.png")
    compare.close()
    window.compare_dock.hide()

    checkpoint = hf_gpt2(tmp)
    window.open_checkpoint(str(checkpoint))
    pump(app, lambda: window.loaded is not None and window.loaded.config.n_layers == 6 and complete())
    window.set_prompt("w5 w17 w99 w3 w50 w42 w42 w7 w31 w64 w20 w11")
    pump(app, lambda: window.trace is not None and window.trace.n_tokens == 12 and complete())
    dock_of(attention).raise_()
    pump(app, complete)
    dialog = VerifyDialog(str(checkpoint), window.session.prompt, window)
    done = []
    dialog.finished_check.connect(done.append)
    dialog.show()
    dialog.start()
    pump(app, lambda: bool(done))
    dialog.move(window.geometry().center() - dialog.rect().center())
    settle(app, 0.8)
    path = out / f"verify-{w}x{h}-table.png"
    from PySide6.QtGui import QPainter

    image = window.grab().toImage()
    painter = QPainter(image)
    painter.drawPixmap(dialog.geometry().topLeft() - window.geometry().topLeft(), dialog.grab())
    painter.end()
    image.save(str(path))
    print("wrote", path)
    dialog.close()
    window.close()


if __name__ == "__main__":
    main()
