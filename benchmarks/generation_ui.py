"""Generation speed as the user sees it in the generation pane, against ``generate()`` alone.

Offscreen, on the CPU with 2 torch threads: a shown ``GenerationPane`` streams 128 new tokens (greedy)
from a 32-token prompt, from the Generate click to the pane's ``generation_finished`` (the worker
thread, the queued signals, the text insertion, the throttled bar chart, the repaints), and
``explorer.core.generation.generate.generate`` runs the same generation on the same model with no UI. Rounds are
interleaved (one of each per round) after a warm-up; the verdict takes the median over the rounds of
each round's ratio (the two runs of a round see about the same machine load), best and medians are
printed too, and CPU time per token (the GUI thread's apart), which a busy machine disturbs less.

Model: the bundled default (``models/shakespeare``) if it exists, else a random stand-in with the
shakespeare recipe's shape; ``--gpt2`` adds a GPT-2-small-shaped random model (50,257-token vocabulary).

    python benchmarks/generation_ui.py [--runs 15] [--new-tokens 128] [--prompt-tokens 32] [--gpt2]

Target: the UI costs at most 10% (UI tokens/s >= 0.90 x generate() tokens/s).
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

import explorer.ui  # noqa: E402,F401  (binds pyqtgraph to PySide6)
from _models import default_or_stand_in, gpt2_small_loaded  # noqa: E402

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

TARGET_RATIO = 0.90
TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
        "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season")


def prompt_ids(loaded, n: int) -> list[int]:
    tok = loaded.tokenizer
    if tok.name == "stand-in words":
        return [(i * 7) % tok.vocab_size for i in range(n)]
    ids = tok.encode(TEXT * 4)
    return ids[:n]


def bench(loaded, label: str, n_new: int, n_prompt: int, runs: int) -> float:
    from explorer.core.generation.generate import generate
    from explorer.ui.generation import GenerationPane
    from explorer.ui.session.selection import Selection

    app = QApplication.instance()
    pane = GenerationPane(Selection())
    pane.resize(520, 1000)
    pane.show()
    pane.set_model(loaded)
    ids = prompt_ids(loaded, n_prompt)
    pane.set_prompt(loaded.tokenizer.decode(ids), ids)
    pane.greedy.setChecked(True)
    pane.max_new.setValue(n_new)
    pane.random_seed.setChecked(False)
    pane.stop_at_eos = False  # always the full count of new tokens
    params = pane.current_params()
    app.processEvents()

    redraws = [0]
    draw = pane.step_view.draw

    def counted_draw() -> None:
        redraws[0] += 1
        draw()

    pane.step_view.draw = counted_draw
    pane._bar_timer.timeout.disconnect()
    pane._bar_timer.timeout.connect(counted_draw)

    def ui_run() -> tuple[float, float, float, float, int]:
        """Wall seconds, the worker's own step seconds, GUI-thread CPU seconds (painting included),
        process CPU seconds, chart redraws."""
        loop = QEventLoop()
        done = []
        pane.generation_finished.connect(lambda result: (done.append(result), loop.quit()))
        QTimer.singleShot(600_000, loop.quit)
        redraws[0] = 0
        c0, g0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
        assert pane.generate()
        loop.exec()
        wall, gui, cpu = time.perf_counter() - t0, time.thread_time() - g0, time.process_time() - c0
        pane.generation_finished.disconnect()
        result = done[0]
        assert result.n_new == n_new, result.stop_reason
        app.processEvents()  # the last repaints, outside the timing
        return wall, result.elapsed, gui, cpu, redraws[0]

    core_tokens: list[list[int]] = []

    def core_run() -> tuple[float, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        result = generate(loaded, ids, params)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert result.n_new == n_new, result.stop_reason
        core_tokens.append(result.token_ids)
        return wall, cpu

    ui_run(), core_run()  # warm-up
    ui, core = [], []
    for _ in range(runs):  # interleaved: a change in the machine's load hits both alike
        ui.append(ui_run())
        core.append(core_run())
    assert [s.token_id for s in pane.steps] == core_tokens[-1], "the pane generated other tokens"

    def med(rows: list, i: int) -> float:
        return statistics.median(r[i] for r in rows)

    best_ui, best_core = min(r[0] for r in ui), min(r[0] for r in core)
    med_ui, med_core = med(ui, 0), med(core, 0)
    print(f"\n{label}: {loaded.config.describe()}")
    print(f"  {len(ids)}-token prompt, {n_new} new tokens, greedy; {runs} interleaved rounds after a warm-up")
    print(f"  generate() alone          best {n_new / best_core:7.1f} tokens/s   median {n_new / med_core:7.1f}"
          f"   CPU {1e3 * med(core, 1) / n_new:.2f} ms/token")
    print(f"  streamed through the pane best {n_new / best_ui:7.1f} tokens/s   median {n_new / med_ui:7.1f}"
          f"   CPU {1e3 * med(ui, 3) / n_new:.2f} ms/token   (Generate click to generation_finished)")
    print(f"    of which the GUI thread  {1e3 * med(ui, 2) / n_new:.3f} ms/token (painting included); "
          f"the steps in the worker {n_new / med(ui, 1):.1f} tokens/s; chart redrawn {med(ui, 4):.0f} times a run")
    paired = statistics.median(c[0] / u[0] for u, c in zip(ui, core))
    verdict = "ok" if paired >= TARGET_RATIO else "OVER TARGET"
    print(f"  UI / generate() tokens/s: {paired:.3f} (median of the rounds' ratios; best {best_core / best_ui:.3f}, "
          f"medians {med_core / med_ui:.3f}); target >= {TARGET_RATIO:.2f}: {verdict}")
    pane.close()
    return paired


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--gpt2", action="store_true", help="also a GPT-2-small-shaped random model")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    loaded, what = default_or_stand_in()
    print(f"default model: {what}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, load average {os.getloadavg()[0]:.1f}")
    bench(loaded, "default model", args.new_tokens, args.prompt_tokens, args.runs)
    if args.gpt2:
        loaded, what = gpt2_small_loaded(), "GPT-2 small shape, random weights"
        bench(loaded, what, args.new_tokens, args.prompt_tokens, args.runs)
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
