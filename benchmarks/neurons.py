"""How fast the FFN neurons panel redraws its heatmap at GPT-2 small's d_ff = 3072, offscreen, CPU, 2 threads.

The model is GPT-2-small-shaped with random weights, built in memory from ``transformers.GPT2Config()``
through ``convert_gpt2`` / ``assign_weights``; prompts are 64 and 256 random token ids. For each,
the panel is prepared (the worker's part) and shown once, then the heatmap is redrawn 20 times
(``redraw_heatmap`` plus the event processing that repaints it: what changing the column order or
K costs) with all 3072 columns and with the top 64. Also printed: the worker's ``prepare`` and a
neuron selection (a cache miss: the [V, d] @ [d] vocabulary effect, bars and histogram).

    python benchmarks/neurons.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the app sets it (explorer/ui/app.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)

import explorer.ui  # noqa: E402,F401
from _models import gpt2_small_loaded  # noqa: E402

from PySide6.QtWidgets import QApplication  # noqa: E402



def timed_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])

    from explorer.ui.panels.neurons import NeuronsPanel
    from explorer.ui.session.selection import Selection

    loaded = gpt2_small_loaded()
    cfg = loaded.config
    print(f"{loaded.name}: {cfg.describe()}")
    print(f"offscreen, torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}; "
          f"medians of {args.runs} runs")
    selection = Selection()
    panel = NeuronsPanel(selection)
    panel.set_tokenizer(loaded.tokenizer)
    panel.resize(1600, 1000)
    panel.show()
    app.processEvents()
    rng = np.random.default_rng(0)
    selection.set_layer(5)
    for n in (64, 256):
        trace = loaded.trace_ids(rng.integers(0, loaded.tokenizer.vocab_size, n).tolist())
        snapshot = panel.snapshot()  # taken on the GUI thread when the trace is requested
        t0 = time.perf_counter()
        panel.prepare(trace, snapshot)
        prepare_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        panel.set_trace(trace)
        app.processEvents()
        show_ms = (time.perf_counter() - t0) * 1000
        print(f"\n{n} tokens, layer {panel.layer()}, d_ff = {cfg.d_ff}")
        print(f"  prepare (worker thread, once per trace):   {prepare_ms:7.1f} ms")
        print(f"  show_trace + repaint (first draw):         {show_ms:7.1f} ms")

        def redraw() -> None:
            panel.redraw_heatmap()
            app.processEvents()

        for k, what in ((0, f"all {cfg.d_ff} columns"), (64, "top 64 columns")):
            panel.set_top_k(k)
            app.processEvents()
            assert panel.heatmap.matrix.shape == (n, cfg.d_ff if k == 0 else k)
            print(f"  heatmap redraw, {what:<18}             {timed_ms(redraw, args.runs):7.1f} ms")
        neurons = iter(range(1000, 1000 + args.runs))

        def select() -> None:
            panel.select_neuron(next(neurons))
            app.processEvents()

        print(f"  select a new neuron (vocab effect, bars):  {timed_ms(select, args.runs):7.1f} ms")
    panel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
