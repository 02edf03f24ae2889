"""The Model diagram panel's interactivity on a GPT-2-small-shaped random model at 256 tokens (offscreen).

Prints medians over ``--runs`` (after one warm-up) of:

* prepare (the worker's part: every drawn box's summary) and draw (the scene built and filled) for a new trace;
* layer / head / token switch -> redrawn (``Selection`` change to the panel showing the new numbers, on the GUI
  thread; target 16 ms, as in benchmarks/ui.py), as wall time and as the GUI thread's CPU time (which a
  machine loaded by other work inflates much less);
* building the tour's 11 steps for one token (done when "Follow this token…" is clicked).

    python benchmarks/diagram.py [--runs 7] [--tokens 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SWITCH_MS = 16.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from _models import gpt2_small_loaded
    from PySide6.QtWidgets import QApplication

    import explorer.ui  # noqa: F401
    from explorer.core.diagram.tour import tour_steps
    from explorer.ui.panels.diagram import DiagramPanel
    from explorer.ui.panels.diagram.panel import summaries_of
    from explorer.ui.session.selection import Selection

    app = QApplication.instance() or QApplication([])
    loaded = gpt2_small_loaded()
    ids = [(i * 7919) % 50000 + 100 for i in range(args.tokens)]
    trace = loaded.trace_ids(ids)
    selection = Selection()
    panel = DiagramPanel(selection)
    panel.set_tokenizer(loaded.tokenizer)
    panel.resize(1280, 800)
    panel.show()
    app.processEvents()

    cpu: dict[str, list[float]] = {"layer": [], "head": [], "token": []}

    def ms(f, what: str = "") -> float:
        t, c = time.perf_counter(), time.thread_time()
        f()
        app.processEvents()
        if what:
            cpu[what].append((time.thread_time() - c) * 1000)
        return (time.perf_counter() - t) * 1000

    prepare, draw, tour = [], [], []
    switches: dict[str, list[float]] = {"layer": [], "head": [], "token": []}
    for run in range(args.runs + 1):
        selection.set_layer(0), selection.set_head(0), selection.set_token(None)
        t = time.perf_counter()
        view = summaries_of(trace, 0, 0, None, loaded.tokenizer)
        p = (time.perf_counter() - t) * 1000
        panel._diagram = None  # a new trace: the scenes are built again
        d = ms(lambda: panel.set_trace(trace, view))
        layer, head, token = (run % 11) + 1, (run % 11) + 1, (run * 37) % args.tokens
        s = {"layer": ms(lambda: selection.set_layer(layer), "layer"),
             "head": ms(lambda: selection.set_head(head), "head"),
             "token": ms(lambda: selection.set_token(token), "token")}
        assert panel.view.layer == layer and panel.view.head == head and panel.view.token == token
        t = time.perf_counter()
        tour_steps(trace, token, layer, head, loaded.tokenizer)
        tr = (time.perf_counter() - t) * 1000
        if run == 0:
            for values in cpu.values():
                values.clear()
            continue  # warm-up
        prepare.append(p), draw.append(d), tour.append(tr)
        for k, v in s.items():
            switches[k].append(v)

    med = statistics.median
    print(f"Model diagram, GPT-2-small-shaped (random), {args.tokens} tokens, {args.threads} threads, "
          f"medians of {args.runs} runs")
    print(f"  new trace: prepare (worker) {med(prepare):7.1f} ms, draw (GUI) {med(draw):7.1f} ms")
    for what, values in switches.items():
        v = med(values)
        c = med(cpu[what])
        print(f"  {what:<5} switch -> redrawn: {v:7.1f} ms wall (max {max(values):.1f}), {c:5.1f} ms GUI-thread CPU "
              f"(target {SWITCH_MS:.0f} ms: wall {'ok' if v <= SWITCH_MS else 'MISSED'}, "
              f"CPU {'ok' if c <= SWITCH_MS else 'MISSED'})")
    print(f"  the tour's 11 steps for one token: {med(tour):7.1f} ms")


if __name__ == "__main__":
    main()
