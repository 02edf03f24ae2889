"""Screenshot of File ▸ Get a model… mid-download, over the main window, against the local stand-in for the
Hub of tests/fake_hub.py (a tiny random GPT-2 served, slowly, as SmolLM2-135M-Instruct; nothing leaves the
machine).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1280x800x24" python docs/shots_get_model.py --out docs
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "docs"), str(ROOT / "tests")]

from screenshots import pump, screenshot_window, settle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from fake_hub import FakeHub, Fault, gpt2_repo_files

    work = Path(tempfile.mkdtemp(prefix="shots-get-"))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=50257)).save_pretrained(work / "model")
    repo = "HuggingFaceTB/SmolLM2-135M-Instruct"
    hub = FakeHub()
    hub.add(repo, gpt2_repo_files(work / "model"))
    hub.faults[repo, "model.safetensors"] = Fault(bytes_per_second=6_000_000)
    hub.start()
    os.environ.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(work / "hf-cache"), HF_HOME=str(work / "hf-home"))

    from explorer.ui.window.get_model import GetModelDialog

    with screenshot_window(w, h, at_origin=True) as (app, window):
        window.open_checkpoint(None)  # the default model, its sample prompt analysed
        pump(app, lambda: window.trace is not None)
        dialog = GetModelDialog(window.settings, window)
        dialog.show()
        dialog.move(window.geometry().center() - dialog.rect().center())
        row = next(i for i in range(dialog.list.topLevelItemCount())
                   if dialog.list.topLevelItem(i).data(0, 0x0100) == repo)
        dialog.list.setCurrentItem(dialog.list.topLevelItem(row))
        dialog.start()
        pump(app, lambda: dialog.bar.value() > 400, timeout_s=120)
        settle(app, 0.2)
        path = Path(args.out) / f"get-model-{w}x{h}-downloading.png"
        app.primaryScreen().grabWindow(0).save(str(path))
        print("wrote", path, "|", dialog.status.text())
        dialog.stop()
        pump(app, lambda: not dialog.busy(), timeout_s=60)
        dialog.close()
    hub.stop()


if __name__ == "__main__":
    main()
