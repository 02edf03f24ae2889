"""Screenshots for issue 42 on a laptop screen: the window after opening a 30-layer GGUF file (SmolLM2-135M's
shape, random weights, Q4_0, from a long path), Help ▸ About on it, and the patching panel's fields typed in.

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1280x800x24" python docs/shots_reopen.py --size 1280x800 --out docs
    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1600x1000x24" python docs/shots_reopen.py --size 1600x1000 --out docs

The X screen is the size given: the window starts at its own first size there (94 % of the screen), opens the
bundled model, then the GGUF file, as a user does; the script fails if the window grows past the screen.
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

PROMPT = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def smollm_shaped_gguf(folder: Path) -> Path:
    """A 30-layer Llama of SmolLM2-135M's shape (576 wide, 9 heads of which 3 key/value, 49,152 tokens), random,
    written as llama.cpp writes Q4_0; its vocabulary GPT-2's byte alphabet and placeholders."""
    import torch
    import transformers
    from gguf_files import byte_vocabulary, write_model

    path = folder / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF" / "smollm2-135m-instruct-q4_0.gguf"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                                      tie_word_embeddings=True, rms_norm_eps=1e-5)
    model = transformers.LlamaForCausalLM(config).eval()
    vocab = byte_vocabulary(189)
    n = config.vocab_size
    vocab["tokens"] = vocab["tokens"][:-1] + [f"<extra_{i}>" for i in range(n - len(vocab["tokens"]))] + ["<|endoftext|>"]
    vocab["types"] = [1] * 188 + [4] * (n - 189) + [3]
    vocab["bos"] = vocab["eos"] = n - 1
    return write_model(model, path, "llama", "Q4_0", tokenizer=vocab)


def shows(window, prompt: str) -> bool:
    """The trace on screen is the GGUF model's, of ``prompt``."""
    frame = window.presenter.frame
    return (frame is not None and frame.source.text == prompt and window.loaded is not None
            and frame.trace.config.n_layers == 30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--models", default=None, help="a folder for the GGUF file (kept between runs)")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    out = Path(args.out)
    scratch = Path(tempfile.mkdtemp(prefix="shots-reopen-"))  # removed at the end (the GGUF file too, unless --models)
    try:
        shots(args, w, h, out, smollm_shaped_gguf(Path(args.models) if args.models else scratch), scratch)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def shots(args, w: int, h: int, out: Path, gguf: Path, scratch: Path) -> None:
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QGuiApplication

    from explorer.ui.app import ensure_app
    from explorer.ui.window.main_window import MainWindow

    app = ensure_app("light")
    screen = QGuiApplication.primaryScreen().availableGeometry()
    assert (screen.width(), screen.height()) == (w, h), f"run it on a {w}x{h} X screen, not {screen}"
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, device="cpu")  # its own first size on this screen
    window.move(0, 0)
    window.show()
    window.open_checkpoint(None)
    pump(app, lambda: complete(window))
    before = window.width()
    window.open_checkpoint(str(gguf))  # File > Open, the quantised file
    pump(app, lambda: window.loaded is not None and window.loaded.config.n_layers == 30)
    window.set_prompt(PROMPT)
    pump(app, lambda: shows(window, PROMPT) and complete(window))
    settle(app, 0.8)
    print(f"window {before} px wide before, {window.width()} px after the GGUF file, screen {w}")
    assert window.frameGeometry().right() < w, "the window grew past the screen"
    QGuiApplication.primaryScreen().grabWindow(0).save(str(out / f"gguf-{w}x{h}-window.png"))

    from explorer.ui.window.about import show_about

    about = show_about(window.loaded, window)
    settle(app, 0.8)
    frame = about.frameGeometry()
    assert frame.right() < w and frame.bottom() < h, f"About is {frame} on a {w}x{h} screen"
    QGuiApplication.primaryScreen().grabWindow(0).save(str(out / f"about-{w}x{h}-gguf.png"))
    about.close()

    panel = next(p for p in window.panels if type(p).__name__ == "PatchingPanel")
    next(d for d in window.docks if d.panel is panel).raise_()
    pump(app, lambda: panel.trace is window.trace)
    panel.corrupt_edit.setText(CORRUPT)
    panel.target_edit.setText(" John")
    panel.distractor_edit.setText(" Mary")
    settle(app, 0.8)
    window.grab().save(str(out / f"patching-{w}x{h}-fields.png"))
    print("wrote", out / f"gguf-{w}x{h}-window.png", out / f"about-{w}x{h}-gguf.png", out / f"patching-{w}x{h}-fields.png")
    window.close()


if __name__ == "__main__":
    main()
