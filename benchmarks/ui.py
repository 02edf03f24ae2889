"""How fast the window follows the user, offscreen on the CPU with 2 threads.

* prompt edit -> every visible panel updated: from the trace request (after the debounce) to the
  last panel's ``show_trace`` returning: encode, forward pass and derived keys in the worker, then
  drawing on the GUI thread;
* head switch -> detail redrawn: ``Selection.set_head`` plus the event processing that repaints.

Models: the default model at 64 tokens (a random stand-in with the shakespeare recipe's shape
while ``models/shakespeare`` is not trained yet) and a GPT-2-small-shaped random model at 256
tokens, built in memory from ``transformers.GPT2Config()`` through ``convert_gpt2``.

    python benchmarks/ui.py [--runs 9]

Targets for the default model: under 150 ms per edit and 16 ms per head switch.
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

import torch  # noqa: E402

torch.set_num_threads(2)

import explorer.ui  # noqa: E402,F401
from _models import default_or_stand_in, gpt2_small_loaded  # noqa: E402

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

TARGETS_MS = {"edit": 150.0, "head": 16.0}




def prompt_of(loaded, n_tokens: int, variant: int) -> str:
    """A text of exactly ``n_tokens`` tokens; each variant differs in its last tokens."""
    tok = loaded.tokenizer
    if tok.name == "stand-in words":
        return " ".join(f"w{(i * 7 + variant) % tok.vocab_size}" for i in range(n_tokens))
    from explorer.ui.main_window import sample_prompts

    base = tok.encode(" ".join(sample_prompts() * 20))
    for ending in (f" and {variant} more", f" and {variant} more.", f", {variant} more", f" {variant}."):
        tail = tok.encode(ending)
        for k in range(max(1, n_tokens - len(tail) - 16), n_tokens + 16):  # re-encoding can merge or split
            text = tok.decode(base[:k] + tail)
            if len(tok.encode(text)) == n_tokens:
                return text
    raise RuntimeError(f"could not make a prompt of {n_tokens} tokens")


def wait_for(signal, timeout_ms: int = 120_000):
    loop = QEventLoop()
    got = []
    signal.connect(lambda *args: (got.append(args), loop.quit()))
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    if not got:
        raise TimeoutError("no trace arrived")
    return got[0]


def bench(window, loaded, label: str, n_tokens: int, runs: int) -> dict[str, float]:
    from explorer.ui.workers import LoadRequest, LoadResult

    app = QApplication.instance()
    window._on_model_loaded(LoadResult(LoadRequest(None, "cpu"), loaded, None))
    window.set_prompt(prompt_of(loaded, n_tokens, 0))  # the stand-in's vocabulary reads no sample prompt
    wait_for(window.trace_applied)

    panel_ms: dict[str, list[float]] = {p.title: [] for p in window.panels}
    originals = {}
    for panel in window.panels:
        originals[panel] = panel.set_trace

        def timed(trace, panel=panel):
            t0 = time.perf_counter()
            originals[panel](trace)
            panel_ms[panel.title].append((time.perf_counter() - t0) * 1000)

        panel.set_trace = timed
    worker_ms, forward_ms, edit_ms = [], [], []

    def on_result(result) -> None:
        worker_ms.append(result.worker_seconds * 1000)
        forward_ms.append(result.trace.meta.forward_seconds * 1000)

    window.controller.trace_ready.connect(on_result)
    for run in range(runs + 2):
        window.controller.request(prompt_of(loaded, n_tokens, run))
        wait_for(window.trace_applied)
        app.processEvents()
        edit_ms.append(window.last_update_seconds * 1000)
    assert window.trace.n_tokens == n_tokens

    head_ms = []
    n_heads = loaded.config.n_heads
    for run in range(3 * runs + 2):
        t0 = time.perf_counter()
        window.selection.set_head((window.selection.head + 1) % n_heads)
        app.processEvents()
        head_ms.append((time.perf_counter() - t0) * 1000)

    def med(values: list[float]) -> float:
        return statistics.median(values[2:]) if len(values) > 2 else statistics.median(values)

    print(f"\n{label}: {loaded.config.describe()}")
    print(f"  {n_tokens} tokens, {runs} runs (medians, first 2 dropped as warm-up)")
    print(f"  prompt edit -> all visible panels updated: {med(edit_ms):7.1f} ms "
          f"(worker {med(worker_ms):.1f} ms, of which the forward pass {med(forward_ms):.1f} ms)")
    for title, values in panel_ms.items():
        if values:
            print(f"      {title:<28} show_trace {med(values):7.1f} ms")
    print(f"  head switch -> redrawn:                    {med(head_ms):7.1f} ms")
    for panel in window.panels:
        del panel.set_trace
    window.controller.trace_ready.disconnect(on_result)
    return {"edit": med(edit_ms), "head": med(head_ms)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    import tempfile

    from explorer.ui.main_window import MainWindow

    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(str(Path(tmp) / "bench.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, device="cpu")
        window.resize(1600, 1000)
        window.show()
        app.processEvents()
        loaded, what = default_or_stand_in()
        print(f"default model: {what}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
              f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
        result = bench(window, loaded, "default model", 64, args.runs)
        for key, target in TARGETS_MS.items():
            verdict = "ok" if result[key] <= target else "OVER TARGET"
            print(f"  target {key}: {result[key]:.1f} ms <= {target:.0f} ms: {verdict}")
        loaded, what = gpt2_small_loaded(), "GPT-2 small shape, random weights"
        bench(window, loaded, what, 256, args.runs)
        window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
