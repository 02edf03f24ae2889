"""benchmarks/ui.py's Experts-panel section, for a mixture-of-experts section (``olmoe-1024``: OLMoE-1B-7B's shape
with 4 of its 16 layers, 64 experts, top 8, 1024 tokens on the CPU; ``qwen3moe-1024`` on a GPU).

In the window's default (tabbed) layout with the Experts tab raised (medians, the first two of each dropped):

* switch -> redrawn: the ``Selection`` change (or the panel's own control) plus the event processing that repaints,
  for a layer switch (the next MoE layer: its routing map, margins, load), a token switch (the row outline, the
  lanes; the effects go to the background lane), the map's values (weights / router scores) and its columns (by
  number / by load); then the same token switch with the "Selected token" tab raised (its lanes and table);
* the longest GUI-thread stall (a 10 ms heartbeat's largest gap) from each change until the window is complete
  (every visible panel drawn, no background view left): switches, an edit of the prompt, and an expert
  switched off and cleared (each a forward pass again, with the panels redrawn);

targets: switches <= 16 ms, stalls <= 50 ms.
"""

from __future__ import annotations

import statistics
import time

from _window import STALL_MS, SWITCH_MS, complete, prompt_of, pump_until


def _med(values: list[float]) -> float:
    return statistics.median(values[2:]) if len(values) > 2 else statistics.median(values)


def experts_bench(app, window, loaded, n_tokens: int, runs: int, beat, label: str = "") -> None:
    from explorer.core.interventions.spec import Intervention
    from explorer.ui.session.workers import LoadRequest, LoadResult

    if window.loaded is not loaded:
        window.session.use_model(LoadResult(LoadRequest(None, str(loaded.device)), loaded, None))
        pump_until(app, lambda: window.trace is not None and complete(window))
    window.set_prompt(prompt_of(loaded, n_tokens, 1))
    pump_until(app, lambda: window.trace is not None and window.trace.n_tokens == n_tokens and complete(window))
    window.reset_layout()
    window.raise_panel("experts")
    app.processEvents()
    pump_until(app, lambda: complete(window))
    panel, sel, cfg = window.panel("experts"), window.selection, loaded.config
    assert panel.on_screen, "the Experts tab is not on screen"
    moe = list(cfg.moe_layers)
    switch: dict[str, list[float]] = {}
    stall: dict[str, list[float]] = {}

    def timed(name: str, change) -> None:
        t0 = time.perf_counter()
        change()
        app.processEvents()
        switch.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
        pump_until(app, lambda: complete(window))
        stall.setdefault(name, []).append(beat.max_gap_ms(t0, time.perf_counter()))

    for run in range(2 * runs + 2):
        timed("layer", lambda: sel.set_layer(moe[(moe.index(panel.shown_layer()) + 1) % len(moe)]))
        timed("token", lambda: sel.set_token(((sel.token or 0) + 7) % n_tokens))
        timed("map values", lambda: panel.set_values("scores" if panel.values == "weights" else "weights"))
        timed("columns", lambda: panel.set_order("load" if panel.order == "index" else "index"))
    panel.content.setCurrentIndex(1)  # the Selected token tab: its lanes and effects table
    pump_until(app, lambda: complete(window))
    for run in range(2 * runs + 2):
        timed("token (Selected token tab)", lambda: sel.set_token(((sel.token or 0) + 5) % n_tokens))
    panel.content.setCurrentIndex(0)
    pump_until(app, lambda: complete(window))

    def retraced(name: str, change, done) -> None:
        t0 = time.perf_counter()
        change()
        pump_until(app, lambda: done() and complete(window))
        t1 = time.perf_counter()
        stall.setdefault(name, []).append(beat.max_gap_ms(t0, t1))
        switch.setdefault(name + " (until complete)", []).append((t1 - t0) * 1000)

    state = window.interventions
    for run in range(runs + 2):
        ids_before = window.trace
        retraced("edit", lambda r=run: window.controller.request(prompt_of(loaded, n_tokens, 10 + r)),
                 lambda: window.trace is not ids_before and not window.trace.interventions)
        layer = panel.shown_layer()
        expert = int(panel.expert_load().argmax())
        retraced("expert off", lambda: state.set(Intervention("expert", layer, expert, "zero")),
                 lambda: bool(window.trace.interventions))
        retraced("expert cleared", state.clear, lambda: not window.trace.interventions)

    print(f"\n  Experts panel{(' ' + label) if label else ''}: {n_tokens} tokens x {cfg.n_experts} experts, top "
          f"{cfg.experts_per_token}, {len(moe)} MoE layers (tabbed layout, the Experts tab raised; medians)")
    for name, values in switch.items():
        if name.endswith("(until complete)"):
            print(f"    {name:<40} {_med(values):8.1f} ms")
            continue
        v = _med(values)
        print(f"    {name + ' switch -> redrawn':<40} {v:8.1f} ms  (target {SWITCH_MS:.0f} ms: "
              f"{'ok' if v <= SWITCH_MS else 'MISSED'})")
    for name, values in stall.items():
        worst = max(values[2:] or values)
        print(f"    longest GUI stall, {name:<28} {worst:8.1f} ms  (target {STALL_MS:.0f} ms: "
              f"{'ok' if worst <= STALL_MS else 'MISSED'}; median {_med(values):.1f} ms)")
