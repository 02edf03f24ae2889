"""benchmarks/ui.py's timeline and compare sections (GPT-2-small shape, 256 tokens): what they time is in
ui.py's docstring."""

from __future__ import annotations

import os
import statistics
import time

from _window import SWITCH_MS, complete, prompt_of, pump_until


def step_switches(app, window, timeline, runs: int, applied: list, shown: list, rows: dict[str, list[float]],
                  settled) -> None:
    """Time ``2 * runs + 2`` step switches into ``rows`` (switch, first, complete; forward when asked for)."""
    for run in range(2 * runs + 2):
        t = 1 + (run * 37) % (timeline.total - 1)
        applied.clear()
        shown.clear()
        t0 = time.perf_counter()
        timeline.set_step(t)
        rows["switch"].append((time.perf_counter() - t0) * 1000)
        pump_until(app, lambda: settled() and applied and applied[-1] is window.trace and complete(window))
        rows["first"].append((shown[0] - t0) * 1000)
        rows["complete"].append((time.perf_counter() - t0) * 1000)
        if "forward" in rows:
            rows["forward"].append(window.trace.meta.forward_seconds * 1000)


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
    # the presenter's timing signal: each panel drawn and painted (shown[0]: the first panel of the step)
    window.presenter.timed.connect(lambda timing: shown.append(timing.painted) if timing.what == "draw" else None)
    step_switches(app, window, timeline, runs, applied, shown, rows, lambda: True)
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
    step_switches(app, window, timeline, runs, applied, shown, streamed, lambda: timeline.waiting is None)
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
        pump_until(app, lambda: view.tables_position == view.position)
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
        pump_until(app, lambda: view.tables_position == view.position and view.dist.rowCount() > 0
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
