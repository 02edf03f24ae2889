"""Take docs/corpus.md's screenshots: the real window under Xvfb, a small corpus run made first through File ▸ Run
over a corpus… (the bundled default model over 20,000 tokens of the bundled sample, a few seconds), then a
neuron's top examples and the Head finder; then the bundled induction model over 50,000 tokens, whose Head
finder ranks head 1.2 first by induction score (checked here: the script fails otherwise).

    env -u QT_QPA_PLATFORM xvfb-run -a -s "-screen 0 1920x1200x24" python docs/shots_corpus.py --size 1280x800 --out docs

PNGs (prefix corpus-): dialog (the run done), neuron (a neuron's top examples and corpus histogram),
head-finder (the default model), induction-head-finder.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from screenshots import complete, pump, screenshot_window, settle  # noqa: E402

PROMPT = "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun."
LAYER = 2
REPEATED = "The cat sat on the mat. The dog ran to the door. The cat sat on the mat. The dog ran to the door."


def run_through_dialog(app, window, out: Path, tokens: int):
    """File ▸ Run over a corpus… on the bundled sample, ``tokens`` tokens into ``out``; the dialog when done."""
    dialog = window.corpus_runs.run_dialog()
    dialog.tokens.setValue(tokens)
    dialog.set_out(out)
    dialog.start()
    pump(app, lambda: not dialog.busy() and window.session.corpus.run is not None
         and window.session.corpus.run.path == out, timeout_s=600)
    settle(app, 0.5)
    return dialog


def striking_neuron(run, layer: int) -> int:
    """A neuron that fires rarely but hard: the largest max among those above 0 on at most 5% of tokens."""
    import numpy as np

    table = run.unit_table("neurons", layer)
    rare = np.where(table["firing_rate"] <= 0.05, table["max"], -np.inf)
    return int(np.argmax(rare))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens of the default model's run")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="shots-corpus-"))

    with screenshot_window(w, h, folder=tmp) as (app, window):
        window.start("shakespeare")
        pump(app, lambda: complete(window))
        window.set_prompt(PROMPT)
        pump(app, lambda: complete(window) and window.trace.n_tokens > 20)
        dialog = run_through_dialog(app, window, tmp / "shakespeare-sample.db", args.tokens)
        dialog.grab().save(str(out / f"corpus-{w}x{h}-dialog.png"))
        dialog.close()

        window.raise_panel("neurons")
        neurons = window.panel("neurons")
        window.selection.set_layer(LAYER)
        pump(app, lambda: complete(window) and neurons.trace is window.trace and neurons.layer() == LAYER)
        neuron = striking_neuron(window.session.corpus.run, LAYER)
        neurons.select_neuron(neuron)
        neurons.detail.tabs.setCurrentWidget(neurons.detail.evidence)
        pump(app, lambda: complete(window))
        settle(app, 1.0)
        window.grab().save(str(out / f"corpus-{w}x{h}-neuron.png"))

        window.raise_panel("head_finder")
        finder = window.panel("head_finder")
        pump(app, lambda: complete(window) and finder.table.isVisible())
        first = finder.heads()[0]
        window.selection.set_layer_head(*first)
        window.raise_panel("attention")  # the head chosen in the finder, on this prompt, beside it
        pump(app, lambda: complete(window) and window.panel("attention").trace is window.trace)
        settle(app, 1.0)
        window.grab().save(str(out / f"corpus-{w}x{h}-head-finder.png"))

        window.open_checkpoint("induction")
        pump(app, lambda: complete(window) and window.loaded is not None and window.loaded.name == "induction")
        run_through_dialog(app, window, tmp / "induction-sample.db", 50_000).close()
        window.raise_panel("head_finder")
        pump(app, lambda: complete(window) and finder.table.isVisible())
        if finder.heads()[0] != (1, 2):
            raise SystemExit(f"the induction model's head finder ranks {finder.heads()[:3]} first, not head 1.2")
        window.selection.set_layer_head(1, 2)
        attention = window.panel("attention")
        window.raise_panel("attention")
        pump(app, lambda: complete(window) and attention.trace is window.trace)
        window.set_prompt(REPEATED)
        pump(app, lambda: complete(window) and attention.trace is window.trace)
        settle(app, 1.0)
        window.grab().save(str(out / f"corpus-{w}x{h}-induction-head-finder.png"))
    for name in ("dialog", "neuron", "head-finder", "induction-head-finder"):
        print(out / f"corpus-{w}x{h}-{name}.png")


if __name__ == "__main__":
    main()
