"""Screenshots of a conversation in the window (issue 38).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_chat.py --out docs

The models are random Llamas written with ``transformers`` into a temporary folder, over small tokenizers
trained there with the real chat templates of Qwen3 and of the DeepSeek-R1 distills (read from trl's
packaged templates, as ``tests/chat_files.py`` does): ``--shape gpt2`` (the default) gives them GPT-2
small's size (12 layers, 12 heads, d_model 768), ``--shape tiny`` a 2-layer one. Their weights are random,
so what they say is noise; the template, the ids and the spans are the real ones.

* chat-1280x800-attention.png: a system prompt, a question, an answer and a follow-up, written with the
  conversation editor (Formatted view), with the role bands along both axes of the Attention panel;
* chat-1280x800-lens.png: the same conversation in the Residual panel's logit lens (bands along its tokens);
* chat-1280x800-roles.png: the Roles panel (the answer's attention on each span);
* chat-1280x800-thinking.png: the DeepSeek-R1 template (its generation prompt opens ``<think>``), a greedy
  reply rigged to close its reasoning after 5 tokens and end its turn 4 tokens later, the timeline paused
  inside the reasoning: the slider's strip and the generated text tell the thinking from the answer.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ui"))

from screenshots import open_window, pump, settle  # noqa: E402

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Italy?"},
]
SHAPES = {"gpt2": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       num_key_value_heads=12),
          "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2)}


STD = {"gpt2": 0.06, "tiny": 0.5}  # the weights' spread: at GPT-2's width, 0.5 would make every head one-hot


def done(window) -> bool:
    return window.trace is not None and window.presenter.is_idle() and window.session.conversation.is_idle()


def shot(app, window, path: Path) -> None:
    pump(app, lambda: done(window))
    settle(app, 0.8)
    window.grab().save(str(path))
    print("wrote", path)


def conversation_shots(folder: Path, out: Path, size: tuple[int, int], shape: str) -> None:
    from chat_model import build_chat_model
    from PySide6.QtWidgets import QScrollArea

    model = build_chat_model(folder / f"qwen3-{shape}", "qwen3", size=SHAPES[shape], std=STD[shape])
    app, window = open_window(*size, folder=folder)
    try:
        window.open_checkpoint(str(model["directory"]))
        pump(app, lambda: done(window) and window.session.conversation.available)
        window.prompt_area.show_conversation(True)
        window.session.conversation.set_messages(CONVERSATION)
        pump(app, lambda: done(window) and window.trace.meta.chat is not None
             and len(window.session.conversation.messages) == len(CONVERSATION))
        editor = window.prompt_area.editor
        editor.turns.setCurrentRow(3)
        w, h = size
        window.selection.set_token(window.trace.n_tokens - 1)
        for panel_id, name in (("attention", "attention"), ("residual", "lens")):
            dock = window.dock(panel_id)
            dock.raise_()
            settle(app, 0.3)
            if panel_id == "residual":  # the logit lens sits under the norms: scrolled to, as a user would
                pump(app, lambda: done(window))
                area = dock.findChild(QScrollArea, f"scroll-{dock.objectName()}")
                area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())
            shot(app, window, out / f"chat-{w}x{h}-{name}.png")
        window.dock("roles").raise_()
        settle(app, 0.3)
        shot(app, window, out / f"chat-{w}x{h}-roles.png")
    finally:
        window.close()


def thinking_shot(folder: Path, out: Path, size: tuple[int, int], shape: str) -> None:
    from chat_model import build_chat_model

    model = build_chat_model(folder / f"r1-{shape}", "deepseek_r1", emits=(("</think>", 5), ("eos", 9)),
                             size=SHAPES[shape], std=STD[shape])
    app, window = open_window(*size, folder=folder)
    try:
        window.open_checkpoint(str(model["directory"]))
        pump(app, lambda: done(window) and window.session.conversation.available)
        window.prompt_area.show_conversation(True)
        pump(app, lambda: done(window) and window.trace.meta.chat is not None)
        pane = window.generation
        pane.greedy.setChecked(True)
        pane.generate()
        pump(app, lambda: not pane.running and pane.result is not None)
        pump(app, lambda: done(window) and window.session.timeline.full is not None)
        window.session.timeline.set_step(3)  # inside the reasoning
        window.dock("attention").raise_()
        settle(app, 0.3)
        w, h = size
        shot(app, window, out / f"chat-{w}x{h}-thinking.png")
    finally:
        window.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="docs")
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="gpt2")
    parser.add_argument("--only", choices=("all", "conversation", "thinking"), default="all")
    args = parser.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="shots-chat-") as tmp:
        folder = Path(tmp)
        if args.only in ("all", "conversation"):
            conversation_shots(folder, out, size, args.shape)
        if args.only in ("all", "thinking"):
            thinking_shot(folder, out, size, args.shape)


if __name__ == "__main__":
    main()
