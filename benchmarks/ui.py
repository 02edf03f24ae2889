"""How fast the window follows the user, offscreen, with every panel on screen (docks side by side).

Per model section (medians over the runs, the first two dropped as warm-up):

* edit -> first panel drawn: from the trace request (after the debounce) until the first panel's
  ``set_trace`` returned (encode, forward pass, the panels' cheap ``prepare``, then drawing), read from the
  presenter's timing signal (``Presenter.timed``: a ``Timing`` per panel drawn, per view computed and applied);
* edit -> every visible panel complete: until the progressive views (``explorer.ui.session.progressive``:
  the logit lens, the all-heads mosaic, vocabulary neighbours, a neuron's vocabulary effect) are
  all drawn too;
* the forward pass alone, and the ratios against the targets (complete <= 1.5 x forward + 150 ms,
  first panel <= forward + 100 ms);
* head / layer / token switch -> redrawn (``Selection`` change plus the event processing that
  repaints; progressive work a switch starts is not waited for);
* the same switches -> redrawn in the window's default layout (panels tabbed: the tokenization row, the raised
  tab and the generation dock on screen), measured first: ``window.reset_layout()`` (View > Reset layout)
  tabs the docks (the Embeddings tab raised, as at start), then again with the Attention tab raised
  (``raise_panel``); ``side_by_side`` puts the docks back and the side-by-side switches are timed after;
* head / layer / token switch -> every visible panel complete: until the background work that switch
  started (a panel's "computing…" view) is drawn too;
* the longest stall of the GUI thread during an edit: a 10 ms QTimer heartbeat, the largest gap
  between beats from the request to completion, and which panel's drawing or view's apply ran across it;
* last panel drawn -> progressive views done, and each view's compute (on the lane's worker) and apply
  (on the GUI thread) times.

Models: the default model at 64 tokens, a GPT-2-small-shaped random model at 256 and 1024 tokens,
a Llama-3.2-1B-shaped random model (built in memory) at 256 tokens; ``--memory`` adds the resident
memory over 20 different 512-token prompts on the GPT-2-small-shaped model.

Timeline and compare (GPT-2-small shape, 256 tokens; ``timeline-256``, ``compare-256``):

* timeline step switch: ``Session.timeline.set_step`` (128 prompt + 128 generated tokens, cut from one
  trace of the whole sequence) -> the first panel drawn, and -> every visible panel complete; and the
  same while generating (``Timeline.stream``: each step traced on its own, a forward pass per switch);
* compare: an edit -> the comparison with a second model ready (B's forward pass + the comparison, on a
  worker); a compare cell click -> the selection applied and the panels redrawn, and -> both models'
  distributions and lenses at the clicked position shown. Both orders are timed (B's forward pass started
  with A's when the trace is requested, the app's order; B's after A's trace is ready), with each
  forward pass, the comparison alone, and the target against A's forward and against both (1.5 x (A + B)
  + 150: what two forward passes allow); the click's share that is the compare view's own slot and repaint.

    python benchmarks/ui.py [--runs 5] [--threads 2] [--device cpu|cuda] [--dtype float32|bfloat16]
                            [--models default gpt2-256 gpt2-1024 llama-1b timeline-256 compare-256] [--memory]

With ``--device cuda|cpu`` given (or ``--sections``): the sections of benchmarks/_sections.py instead (each
shape at its prompt length, in the window as above); ``--max-layers`` / ``--tokens`` make a reduced run,
said in the header, e.g. ``--device cpu --sections llama8b-8192 --max-layers 2 --tokens 128``.

A mixture-of-experts section (``olmoe-1024``: OLMoE-1B-7B's shape, 4 of its 16 layers, 64 experts, top 8, on the
CPU; ``qwen3moe-1024`` on a GPU) then times the Experts panel too (``_ui_experts.py``: layer, token, map and
column switches, the stalls of an edit and of an expert switched off; targets 16 and 50 ms); ``--experts-only``
skips the every-panel numbers before it:

    python benchmarks/ui.py --device cpu --sections olmoe-1024 --runs 5

Hybrids (issue 36): ``--device cpu --sections qwen35-1024 gemma4-1024``: a Qwen3.5-0.8B-shaped (18 Gated DeltaNet
+ 6 gated attention layers) and a Gemma-4-E2B-shaped (35 sliding / global layers, KV sharing, per-layer inputs)
random model at 1024 tokens in the window, the switch (<= 16 ms) and stall (<= 50 ms) targets among them. The
head switch runs through the widest layer's heads (a DeltaNet layer's 16); a recurrent layer's head at 1024
tokens is the long-prompt view (its pooled effective attention and each query row computed on a worker), the
all-heads grid every layer's maps (``core/analysis/layer_maps.py``). Gemma 4's prompts are drawn below its cut
per-layer table's rows (``_hybrid_shapes.ID_LIMITS``).
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

import explorer.ui  # noqa: E402,F401
from _edit_probe import JobTimes  # noqa: E402
from _models import default_or_stand_in, gpt2_small_loaded, llama_1b_loaded  # noqa: E402
from _ui_experts import experts_bench  # noqa: E402
from _ui_views import compare_bench, timeline_bench  # noqa: E402
from _window import STALL_MS, SWITCH_MS, Heartbeat, complete, prompt_of, pump_until, side_by_side  # noqa: E402

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

def bench(app, window, loaded, label: str, n_tokens: int, runs: int, beat: Heartbeat,
          id_limit: int | None = None) -> dict[str, float]:
    from explorer.core.analysis.layer_maps import max_maps
    from explorer.ui.session.workers import LoadRequest, LoadResult

    window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
    pump_until(app, lambda: window.trace is not None and complete(window))
    first_drawn: list[float] = []
    drawn_ms: dict[str, list[float]] = {}

    def timed(timing) -> None:  # the presenter's Timing of each panel's set_trace (the view prepared in the background)
        if timing.what == "draw" and window.panel(timing.name) is not None:
            first_drawn.append(timing.end)
            drawn_ms.setdefault(window.panel(timing.name).title, []).append(timing.ms)

    window.presenter.timed.connect(timed)
    jobs = JobTimes(window, beat)
    results, applied = [], []
    window.controller.trace_ready.connect(results.append)
    window.trace_applied.connect(applied.append)  # after the last panel's show_trace
    rows = {k: [] for k in ("first", "drawn", "complete", "worker", "forward", "stall", "views")}
    for run in range(runs + 2):
        text = prompt_of(loaded, n_tokens, run + 1, id_limit)
        first_drawn.clear()
        results.clear()
        applied.clear()
        t0 = time.perf_counter()
        window.controller.request(text)
        pump_until(app, lambda: bool(results) and window.trace is results[-1].trace
                   and applied and applied[-1] is window.trace and complete(window))
        t1 = time.perf_counter()
        rows["first"].append((min(first_drawn) - t0) * 1000)
        rows["drawn"].append((max(first_drawn) - t0) * 1000)
        rows["complete"].append((t1 - t0) * 1000)
        rows["worker"].append(results[-1].worker_seconds * 1000)
        rows["forward"].append(results[-1].trace.meta.forward_seconds * 1000)
        rows["stall"].append(beat.max_gap_ms(t0, t1))
        rows["views"].append((t1 - max(first_drawn)) * 1000)
        jobs.edit_done(t0, t1, beat, counted=run >= 2)  # the first two are warm-up, as in the medians
    assert window.trace.n_tokens == n_tokens, window.trace.n_tokens
    jobs.stop()

    cfg, sel = loaded.config, window.selection
    heads = max_maps(cfg)  # a hybrid's switches run through its widest layer's heads (a DeltaNet layer's 16)
    switches = {"head": [], "layer": [], "token": []}
    settled = {"head": [], "layer": [], "token": []}  # until every visible panel is complete (deferred work too)
    cpu = {"head": [], "layer": [], "token": []}  # the GUI thread's own CPU time in the switch (load-independent-ish)
    per_panel: dict[tuple[str, str], list[float]] = {}
    tabbed: dict[str, dict[str, list[float]]] = {}  # the same switches in the default (tabbed) layout, first
    window.reset_layout()  # the window's own View > Reset layout: panels tabbed, the raised tab and the side dock shown
    for raised in ("", "attention"):  # as reset (the Embeddings tab raised), then with the Attention tab raised
        if raised:
            window.raise_panel(raised)
        app.processEvents()
        pump_until(app, lambda: complete(window))
        shown = ", ".join(p.title for p in window.panels if p.on_screen)
        times = tabbed[shown] = {"head": [], "layer": [], "token": []}
        for run in range(2 * runs + 2):
            for what, change in (("head", lambda: sel.set_head((sel.head + 1) % heads)),
                                 ("layer", lambda: sel.set_layer((sel.layer + 1) % cfg.n_layers)),
                                 ("token", lambda: sel.set_token(((sel.token or 0) + 7) % n_tokens))):
                t0 = time.perf_counter()
                change()
                app.processEvents()
                times[what].append((time.perf_counter() - t0) * 1000)
                pump_until(app, lambda: complete(window))
    side_by_side(window)  # back to every panel on screen; the panels behind tabs catch up before the timed switches
    app.processEvents()
    pump_until(app, lambda: complete(window))
    for panel in window.panels:
        def timed_selection(what, panel=panel, original=panel.selection_changed):
            t = time.perf_counter()
            original(what)
            per_panel.setdefault((what, panel.title), []).append((time.perf_counter() - t) * 1000)

        panel.selection_changed = timed_selection
    for run in range(2 * runs + 2):
        for what, change in (("head", lambda: sel.set_head((sel.head + 1) % heads)),
                             ("layer", lambda: sel.set_layer((sel.layer + 1) % cfg.n_layers)),
                             ("token", lambda: sel.set_token(((sel.token or 0) + 7) % n_tokens))):
            t0, c0 = time.perf_counter(), time.thread_time()
            change()
            app.processEvents()
            switches[what].append((time.perf_counter() - t0) * 1000)
            cpu[what].append((time.thread_time() - c0) * 1000)
            pump_until(app, lambda: complete(window))  # the next switch starts from a settled window
            settled[what].append((time.perf_counter() - t0) * 1000)

    def med(values: list[float]) -> float:
        return statistics.median(values[2:]) if len(values) > 2 else statistics.median(values)

    first, done, fwd = med(rows["first"]), med(rows["complete"]), med(rows["forward"])
    print(f"\n{label}: {cfg.describe()}")
    print(f"  {n_tokens} tokens, {runs} runs (medians, first 2 dropped as warm-up), device {loaded.device}, "
          f"{str(loaded.dtype).replace('torch.', '')}, torch threads {torch.get_num_threads()}")
    print(f"  {n_tokens} tokens, edit -> every visible panel updated: {done:8.1f} ms "
          f"(worker {med(rows['worker']):.1f} ms, of which the forward pass {fwd:.1f} ms)")
    print(f"  edit -> first panel drawn:              {first:8.1f} ms  (target forward + 100 = "
          f"{fwd + 100:.0f} ms: {'ok' if first <= fwd + 100 else 'MISSED'})")
    print(f"  edit -> every visible panel drawn:      {med(rows['drawn']):8.1f} ms  (cheap views; expensive ones "
          f"show 'computing…')")
    print(f"  edit -> every visible panel complete:   {done:8.1f} ms  (target 1.5 x forward + 150 = "
          f"{1.5 * fwd + 150:.0f} ms: {'ok' if done <= 1.5 * fwd + 150 else 'MISSED'})")
    print(f"  ratios: first panel / forward {first / fwd:.2f}, complete / forward {done / fwd:.2f}")
    for what, values in switches.items():
        v = med(values)
        print(f"  {what} switch -> redrawn:                {v:8.1f} ms  (target {SWITCH_MS:.0f} ms: "
              f"{'ok' if v <= SWITCH_MS else 'MISSED'})")
    for shown, times in tabbed.items():
        print(f"  default layout (tabbed), head / layer / token switch -> redrawn: "
              + " / ".join(f"{med(times[what]):.1f}" for what in ("head", "layer", "token")) + f" ms  (on screen: {shown})")
    for what, values in settled.items():
        print(f"  {what} switch -> every visible panel complete: {med(values):8.1f} ms  (work a switch leaves to "
              f"the background included)")
    print("  switch, the GUI thread's CPU time (what a loaded machine adds to the times above is not in it): "
          + ", ".join(f"{what} {med(values):.1f} ms" for what, values in cpu.items()))
    stall = max(rows["stall"][2:] or rows["stall"])
    print(f"  longest GUI-thread stall during an edit: {stall:8.1f} ms  (target {STALL_MS:.0f} ms: "
          f"{'ok' if stall <= STALL_MS else 'MISSED'}; median of the edits {med(rows['stall']):.1f} ms)")
    for title, values in drawn_ms.items():
        print(f"      {title:<30} show_trace {statistics.median(values):7.1f} ms (max {max(values):.1f})")
    print(f"  last panel drawn -> progressive views done: {med(rows['views']):8.1f} ms  (one view at a time on a "
          f"worker, after every panel is drawn; medians per view below)")
    jobs.report()
    for (what, title), values in sorted(per_panel.items()):
        print(f"      {what:<5} {title:<30} selection_changed {statistics.median(values):6.1f} ms")
    window.presenter.timed.disconnect(timed)
    for panel in window.panels:
        del panel.selection_changed
    window.controller.trace_ready.disconnect(results.append)
    window.trace_applied.disconnect(applied.append)
    return {"first": first, "complete": done, "forward": fwd}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def memory_run(app, window, loaded, n_tokens: int = 512, prompts: int = 20) -> None:
    from explorer.ui.session.workers import LoadRequest, LoadResult

    window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
    pump_until(app, lambda: window.trace is not None and complete(window))
    sizes = []
    for i in range(prompts):
        applied = []
        window.trace_applied.connect(applied.append)
        window.controller.request(prompt_of(loaded, n_tokens, 100 + i))
        pump_until(app, lambda: bool(applied) and complete(window))
        window.trace_applied.disconnect(applied.append)
        pump_until(app, lambda: not window.drawing.trim_waiting)  # the trim waits for an idle app (TRIM_IDLE_MS)
        pump_until(app, lambda: __import__("PySide6.QtCore").QtCore.QThreadPool.globalInstance().activeThreadCount() == 0)
        sizes.append(rss_mb())
    print(f"\nresident memory over {prompts} different {n_tokens}-token prompts ({loaded.name}), MB after each:")
    print("  " + " ".join(f"{s:.0f}" for s in sizes))
    print(f"  after the 2nd {sizes[1]:.0f} MB, after the {prompts}th {sizes[-1]:.0f} MB: "
          f"{100 * (sizes[-1] / sizes[1] - 1):+.1f}% (target within 10%: "
          f"{'ok' if sizes[-1] <= 1.1 * sizes[1] else 'MISSED'})")


def trace_cost(loaded, n: int = 1024) -> None:
    from explorer.core.budget import global_budget
    from explorer.core.trace import CaptureSpec, estimate_nbytes

    cfg = loaded.config
    full = estimate_nbytes(cfg, n, CaptureSpec.full())
    compact = estimate_nbytes(cfg, n, CaptureSpec.compact())
    print(f"  a Trace of {loaded.name} at {n} tokens: {full / 2**20:.0f} MB stored (full capture; compact "
          f"{compact / 2**20:.0f} MB), memory budget {global_budget().limit / 2**20:.0f} MB (traces and derived values), the "
          f"logit lens memo {(cfg.n_layers + 1) * n * 5 * 20 / 2**20:.1f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--models", nargs="+", default=["default", "gpt2-256", "gpt2-1024", "llama-1b",
                                                        "timeline-256", "compare-256"])
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--experts-only", action="store_true",
                        help="a mixture-of-experts section: only the Experts panel's switches and stalls")
    import _sections

    _sections.add_arguments(parser)
    args = parser.parse_args()
    args.device_given = _sections.device_given(sys.argv[1:])
    sections = _sections.wanted(args)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    app = QApplication.instance() or QApplication([])
    import tempfile

    from explorer.ui.window.main_window import MainWindow

    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(str(Path(tmp) / "bench.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, device=args.device)
        window.resize(1600, 1000)
        window.show()
        side_by_side(window)
        app.processEvents()
        beat = Heartbeat()
        print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, torch threads {torch.get_num_threads()}, "
              f"load average {os.getloadavg()[0]:.1f}, every panel on screen")
        gpt2 = None
        for name in sections or []:
            s = _sections.build(name, args.device, dtype, args.max_layers, args.tokens)
            window.set_prompt(prompt_of(s.loaded, 16, 0, s.id_limit))  # a stand-in vocabulary: no prompt of its own
            if not (args.experts_only and s.shape in _sections.MOE_SHAPES):
                bench(app, window, s.loaded, s.header("ui").strip(), s.tokens, args.runs, beat, s.id_limit)
            else:
                print(s.header("ui").strip())
            if s.shape in _sections.MOE_SHAPES:
                experts_bench(app, window, s.loaded, s.tokens, args.runs, beat, s.name)
            from explorer.core.budget import global_budget

            print(f"  {global_budget().describe()}{_sections.peak_line(args.device)}")
            del s
            _sections.release(args.device)
        for name in args.models if sections is None else []:
            if name == "default":
                loaded, what = default_or_stand_in()
                loaded.model.to(args.device, dtype)
                bench(app, window, loaded, f"default model ({what})", 64, args.runs, beat)
            elif name.startswith(("timeline-", "compare-")):
                if gpt2 is None:
                    gpt2 = gpt2_small_loaded()
                    gpt2.model.to(args.device, dtype)
                n = int(name.split("-")[1])
                if name.startswith("timeline-"):
                    timeline_bench(app, window, gpt2, n, args.runs)
                else:
                    other = gpt2_small_loaded()
                    other.model.to(args.device, dtype)
                    with torch.no_grad():  # a copy whose layer 6 queries differ (the same weights otherwise)
                        other.model.blocks[6].attn.W_Q.weight.mul_(1.1)
                    compare_bench(app, window, gpt2, other, n, args.runs)
                    del other
            elif name.startswith("gpt2-"):
                if gpt2 is None:
                    gpt2 = gpt2_small_loaded()
                    gpt2.model.to(args.device, dtype)
                bench(app, window, gpt2, "GPT-2 small shape, random weights", int(name.split("-")[1]),
                      args.runs, beat)
            elif name == "llama-1b":
                loaded = llama_1b_loaded(args.device, dtype)
                window.set_prompt(prompt_of(loaded, 16, 0))  # a stand-in vocabulary: the window has no prompt for it
                bench(app, window, loaded, "Llama-3.2-1B shape, random weights", 256, max(3, args.runs // 2), beat)
                trace_cost(loaded)
                del loaded
        if args.memory:
            if gpt2 is None:
                gpt2 = gpt2_small_loaded()
                gpt2.model.to(args.device, dtype)
            memory_run(app, window, gpt2)
        window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
