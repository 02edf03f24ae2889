"""How fast the window follows the user, offscreen, with every panel on screen (docks side by side).

Per model section (medians over the runs, the first two dropped as warm-up):

* edit -> first panel drawn: from the trace request (after the debounce) until the first panel's
  ``show_trace`` returned (encode, forward pass, the panels' cheap ``prepare``, then drawing);
* edit -> every visible panel complete: until the progressive views (``explorer.ui.session.progressive``:
  the logit lens, the all-heads mosaic, vocabulary neighbours, a neuron's vocabulary effect) are
  all drawn too;
* the forward pass alone, and the ratios against the targets (complete <= 1.5 x forward + 150 ms,
  first panel <= forward + 100 ms);
* head / layer / token switch -> redrawn (``Selection`` change plus the event processing that
  repaints; progressive work a switch starts is not waited for);
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

from PySide6.QtCore import QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

SWITCH_MS, STALL_MS = 16.0, 50.0


def prompt_of(loaded, n_tokens: int, variant: int) -> str:
    """A text of exactly ``n_tokens`` tokens; each variant differs in its last tokens."""
    tok = loaded.tokenizer
    if tok.name == "stand-in words":
        return " ".join(f"w{(i * 7 + variant * 13 + 1) % tok.vocab_size}" for i in range(n_tokens))
    from explorer.ui.window.main_window import sample_prompts

    base = tok.encode(" ".join(sample_prompts() * 40))
    for ending in (f" and {variant} more", f" and {variant} more.", f", {variant} more", f" {variant}."):
        tail = tok.encode(ending)
        for k in range(max(1, n_tokens - len(tail) - 16), n_tokens + 16):  # re-encoding can merge or split
            text = tok.decode(base[:k] + tail)
            if len(tok.encode(text)) == n_tokens:
                return text
    raise RuntimeError(f"could not make a prompt of {n_tokens} tokens")


class Heartbeat:
    """A 10 ms timer on the GUI thread; ``max_gap_ms(since)`` is the longest gap between beats."""

    def __init__(self) -> None:
        self.beats: list[float] = []
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(10)
        self.timer.timeout.connect(lambda: self.beats.append(time.perf_counter()))
        self.timer.start()

    def max_gap_ms(self, since: float, until: float) -> float:
        beats = [since] + [b for b in self.beats if since <= b <= until] + [until]
        return max((b - a) * 1000 for a, b in zip(beats, beats[1:]))


def side_by_side(window) -> None:
    """Every panel dock on screen at once (the default layout tabs them)."""
    docks = window.docks
    for dock in docks[2:]:
        window.splitDockWidget(docks[1], dock, Qt.Orientation.Horizontal)
    for dock in docks:
        dock.show()


def complete(window) -> bool:
    return (not window.progressive.busy and not any(p.computing() for p in window.panels if p.on_screen)
            and not getattr(window.drawing, "checking", False))  # the NaN check (status bar) is done too


def pump_until(app, condition, timeout_s: float = 600.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while not condition():
        app.processEvents()
        if time.perf_counter() > deadline:
            raise TimeoutError("the window did not finish in time")
        time.sleep(0.0005)


def bench(app, window, loaded, label: str, n_tokens: int, runs: int, beat: Heartbeat) -> dict[str, float]:
    from explorer.ui.session.workers import LoadRequest, LoadResult

    window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
    pump_until(app, lambda: window.trace is not None and complete(window))
    first_drawn: list[float] = []
    drawn_ms: dict[str, list[float]] = {}
    originals = {}
    for panel in window.panels:
        originals[panel] = panel.set_trace

        def timed(trace, *view, panel=panel):  # set_trace(trace, view): the view prepared in the background
            t = time.perf_counter()
            originals[panel](trace, *view)
            first_drawn.append(time.perf_counter())
            drawn_ms.setdefault(panel.title, []).append((first_drawn[-1] - t) * 1000)

        panel.set_trace = timed
    jobs = JobTimes(window)
    results, applied = [], []
    window.controller.trace_ready.connect(results.append)
    window.trace_applied.connect(applied.append)  # after the last panel's show_trace
    rows = {k: [] for k in ("first", "drawn", "complete", "worker", "forward", "stall", "views")}
    for run in range(runs + 2):
        text = prompt_of(loaded, n_tokens, run + 1)
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
    switches = {"head": [], "layer": [], "token": []}
    settled = {"head": [], "layer": [], "token": []}  # until every visible panel is complete (deferred work too)
    cpu = {"head": [], "layer": [], "token": []}  # the GUI thread's own CPU time in the switch (load-independent-ish)
    per_panel: dict[tuple[str, str], list[float]] = {}
    for panel in window.panels:
        def timed_selection(what, panel=panel, original=panel.selection_changed):
            t = time.perf_counter()
            original(what)
            per_panel.setdefault((what, panel.title), []).append((time.perf_counter() - t) * 1000)

        panel.selection_changed = timed_selection
    for run in range(2 * runs + 2):
        for what, change in (("head", lambda: sel.set_head((sel.head + 1) % cfg.n_heads)),
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
    for panel in window.panels:
        del panel.set_trace
        del panel.selection_changed
    window.controller.trace_ready.disconnect(results.append)
    window.trace_applied.disconnect(applied.append)
    return {"first": first, "complete": done, "forward": fwd}


def timeline_bench(app, window, loaded, n_tokens: int, runs: int) -> None:
    """Step switches of a generation timeline (see the module docstring)."""
    from explorer.ui.session.workers import LoadRequest, LoadResult

    if window.loaded is not loaded:
        window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
    pump_until(app, lambda: window.trace is not None and complete(window))
    ids = loaded.encode(prompt_of(loaded, n_tokens, 77))[0]
    timeline, n_prompt = window.session.timeline, n_tokens // 2
    applied: list = []
    window.trace_applied.connect(applied.append)
    t0 = time.perf_counter()
    timeline.start(loaded.tokenizer.decode(ids), ids, n_prompt)
    pump_until(app, lambda: timeline.full is not None and applied and applied[-1] is window.trace and complete(window))
    started = (time.perf_counter() - t0) * 1000
    rows: dict[str, list[float]] = {"switch": [], "first": [], "complete": []}
    shown: list[float] = []
    # connected after the window's drawing: runs once the first shown panel has drawn the step
    window.session.trace_ready.connect(lambda _r: shown.append(time.perf_counter()))
    for run in range(2 * runs + 2):
        t = 1 + (run * 37) % (timeline.total - 1)
        applied.clear()
        shown.clear()
        t0 = time.perf_counter()
        timeline.set_step(t)
        rows["switch"].append((time.perf_counter() - t0) * 1000)
        pump_until(app, lambda: applied and applied[-1] is window.trace and complete(window))
        rows["first"].append((shown[0] - t0) * 1000)
        rows["complete"].append((time.perf_counter() - t0) * 1000)
    window.trace_applied.disconnect(applied.append)
    fwd = timeline.full.trace.meta.forward_seconds * 1000
    switch, first = statistics.median(rows["switch"][2:]), statistics.median(rows["first"][2:])
    done = statistics.median(rows["complete"][2:])
    print(f"\ntimeline, GPT-2 small shape, {n_prompt} prompt + {n_tokens - n_prompt} generated tokens "
          f"(one trace of the whole sequence: {started:.0f} ms to start, its forward pass {fwd:.1f} ms)")
    print(f"  step switch -> GUI thread free:         {switch:8.1f} ms  (target {SWITCH_MS:.0f} ms: "
          f"{'ok' if switch <= SWITCH_MS else 'MISSED'}; the step is cut, the panels prepare on workers)")
    print(f"  step switch -> first panel redrawn:     {first:8.1f} ms")
    print(f"  step switch -> every visible panel complete: {done:8.1f} ms  (target 1.5 x forward + 150 = "
          f"{1.5 * fwd + 150:.0f} ms: {'ok' if done <= 1.5 * fwd + 150 else 'MISSED'}; no forward pass runs)")
    # while generating there is no whole sequence yet: each step is traced on its own (the same tokens
    # streamed in without a worker; the user's switches, not the following)
    timeline.stop()
    applied.clear()
    window.trace_applied.connect(applied.append)
    timeline.stream("bench", ids[:n_prompt], ids[n_prompt:])
    pump_until(app, lambda: timeline.waiting is None and applied and applied[-1] is window.trace and complete(window))
    streamed: dict[str, list[float]] = {"switch": [], "first": [], "complete": [], "forward": []}
    for run in range(2 * runs + 2):
        t = 1 + (run * 37) % (timeline.total - 1)
        applied.clear()
        shown.clear()
        t0 = time.perf_counter()
        timeline.set_step(t)
        streamed["switch"].append((time.perf_counter() - t0) * 1000)
        pump_until(app, lambda: timeline.waiting is None and applied and applied[-1] is window.trace and complete(window))
        streamed["first"].append((shown[0] - t0) * 1000)
        streamed["complete"].append((time.perf_counter() - t0) * 1000)
        streamed["forward"].append(window.trace.meta.forward_seconds * 1000)
    window.trace_applied.disconnect(applied.append)
    m = {key: statistics.median(values[2:]) for key, values in streamed.items()}
    print(f"  while generating (each step traced on its own, a forward pass of the prompt + t tokens: median "
          f"{m['forward']:.1f} ms):")
    print(f"  streaming step switch -> GUI thread free:     {m['switch']:8.1f} ms  (target {SWITCH_MS:.0f} ms: "
          f"{'ok' if m['switch'] <= SWITCH_MS else 'MISSED'}; the bar says computing step t)")
    print(f"  streaming step switch -> first panel redrawn: {m['first']:8.1f} ms")
    print(f"  streaming step switch -> every visible panel complete: {m['complete']:8.1f} ms  (target 1.5 x "
          f"forward + 150 = {1.5 * m['forward'] + 150:.0f} ms: "
          f"{'ok' if m['complete'] <= 1.5 * m['forward'] + 150 else 'MISSED'})")
    timeline.stop()


def compare_bench(app, window, loaded, other, n_tokens: int, runs: int) -> None:
    """The comparison with a second model of the same shape (see the module docstring)."""
    from explorer.ui.session.workers import LoadRequest, LoadResult

    if window.loaded is not loaded:
        window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
    pump_until(app, lambda: window.trace is not None and complete(window))
    compare, view = window.session.compare, window.compare_dock.view
    window.compare_dock.show()
    ready: list = []
    compare.ready.connect(ready.append)
    compare.other = other  # model B, as Comparing._loaded leaves it (the load itself is benchmarks/load.py's)
    rows: dict[str, list[float]] = {"click": [], "side": [], "slot": [], "repaint": [], "fill": []}
    orders = {early: {"ready": [], "tables": [], "b_forward": [], "b_alone": [], "compare": [], "a_forward": []}
              for early in (False, True)}
    for run in range(2 * (runs + 2)):  # the two orders alternate, so that a change of load meets both
        early = compare.early = bool(run % 2)  # B's forward started with A's (the app's order), or after it
        got = orders[early]
        ready.clear()
        t0 = time.perf_counter()
        window.controller.request(prompt_of(loaded, n_tokens, 200 + run))
        pump_until(app, lambda: ready and ready[-1].a is window.trace and view.result is ready[-1]
                   and complete(window))
        got["ready"].append((time.perf_counter() - t0) * 1000)
        pump_until(app, lambda: view._shown_key == (id(view.result), view.position))
        got["tables"].append((time.perf_counter() - t0) * 1000)  # the tables at the selected position too
        r = ready[-1]
        got["b_forward"].append(r.seconds * 1000)
        got["b_alone"].append(r.b_forward * 1000)
        got["compare"].append(r.compare_seconds * 1000)
        got["a_forward"].append(r.a.meta.forward_seconds * 1000)
    compare.early = True
    sel = window.selection
    own = view._on_selection  # the compare view's own slot, timed apart from the other panels' redraws
    sel.changed.disconnect(own)

    def timed_slot(what: str) -> None:
        t = time.perf_counter()
        own(what)
        rows["slot"][-1] += (time.perf_counter() - t) * 1000

    shown = view._show_side

    def timed_show(c, position, got) -> None:
        t = time.perf_counter()
        shown(c, position, got)
        rows["fill"].append((time.perf_counter() - t) * 1000)

    sel.changed.connect(timed_slot)
    view._show_side = timed_show
    for run in range(2 * runs + 2):
        position = (run * 53 + 11) % n_tokens
        layer, head = run % loaded.config.n_layers, (run * 5) % loaded.config.n_heads
        rows["slot"].append(0.0)
        t0 = time.perf_counter()
        if run % 2:
            view.js.cell_clicked.emit(layer, head)
        else:
            view.cos.cell_clicked.emit(layer, position)
        app.processEvents()
        rows["click"].append((time.perf_counter() - t0) * 1000)
        t1 = time.perf_counter()
        view.repaint()  # the compare view's own redraw (every plot and table in it), synchronously
        rows["repaint"].append(rows["slot"][-1] + (time.perf_counter() - t1) * 1000)
        pump_until(app, lambda: view._shown_key == (id(view.result), view.position) and view.dist.rowCount() > 0
                   and complete(window))
        rows["side"].append((time.perf_counter() - t0) * 1000)
    view._show_side = shown
    sel.changed.disconnect(timed_slot)
    sel.changed.connect(own)
    compare.ready.disconnect(ready.append)
    med = {k: statistics.median(v[2:] if len(v) > 2 else v) for k, v in rows.items()}
    om = {early: {k: statistics.median(v[2:]) for k, v in got.items()} for early, got in orders.items()}
    late, now = om[False], om[True]
    fwd, b_fwd = late["a_forward"], late["b_alone"]  # each forward pass alone (B's after A's)
    both = 1.5 * (fwd + b_fwd) + 150

    def verdict(ms: float, target: float) -> str:
        return "ok" if ms <= target else "MISSED"

    print(f"\ncompare, GPT-2 small shape against a second model of its shape, {n_tokens} tokens")
    print(f"  (load average {os.getloadavg()[0]:.1f}; the target's forward is A's alone, from the runs with B after A;"
          f" the two orders alternate run by run)")
    print(f"  edit -> comparison ready:               {now['ready']:8.1f} ms  (B's forward pass + the comparison "
          f"{now['b_forward']:.1f} ms on a worker; target 1.5 x forward + 150 = {1.5 * fwd + 150:.0f} ms: "
          f"{verdict(now['ready'], 1.5 * fwd + 150)})")
    for early, label in ((True, "B's forward started with A's (the app's order)"),
                         (False, "B's forward after A's trace is ready")):
        o = om[early]
        print(f"    {label}: edit -> comparison ready {o['ready']:.1f} ms (and its tables at the selected "
              f"position {o['tables']:.1f} ms); A's forward {o['a_forward']:.1f} ms, B's {o['b_alone']:.1f} ms, "
              f"the comparison {o['compare']:.1f} ms, the compare worker {o['b_forward']:.1f} ms")
    print(f"    forwards alone: A {fwd:.1f} + B {b_fwd:.1f} = {fwd + b_fwd:.1f} ms; what two forward passes allow, "
          f"1.5 x (A + B) + 150 = {both:.0f} ms: {verdict(now['ready'], both)} (the app's order), "
          f"{verdict(late['ready'], both)} (B after A)")
    print(f"  compare cell click -> selection redrawn: {med['click']:8.1f} ms  (target {SWITCH_MS:.0f} ms: "
          f"{verdict(med['click'], SWITCH_MS)})")
    print(f"    of which the compare view's own slot {med['slot']:.2f} ms (target {SWITCH_MS:.0f} ms: "
          f"{verdict(med['slot'], SWITCH_MS)}); its slot + a full repaint of the view {med['repaint']:.1f} ms; "
          f"the rest is the other panels' selection_changed")
    print(f"  compare cell click -> both distributions and lenses shown: {med['side']:8.1f} ms")
    print(f"    (computed on a worker, \"computing…\" meanwhile; filling the two tables on the GUI thread "
          f"{med['fill']:.1f} ms)")
    compare.close()


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
            window.set_prompt(prompt_of(s.loaded, 16, 0))  # a stand-in vocabulary: the window has no prompt for it
            bench(app, window, s.loaded, s.header("ui").strip(), s.tokens, args.runs, beat)
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
