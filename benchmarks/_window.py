"""The window-driving helpers benchmarks/ui.py and its views share: a prompt of exactly n tokens, a GUI-thread
heartbeat, every panel side by side, "complete" (the presenter's ``is_idle``: nothing in flight, every shown
panel drawn, no view computing), pumping events until a condition holds."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer

SWITCH_MS, STALL_MS = 16.0, 50.0


def prompt_of(loaded, n_tokens: int, variant: int, limit: int | None = None) -> str:
    """A text of exactly ``n_tokens`` tokens; each variant differs in its last tokens. ``limit``: a stand-in
    vocabulary's words drawn below this id (Gemma-4-E2B's cut per-layer table, benchmarks/_hybrid_shapes.py)."""
    tok = loaded.tokenizer
    if tok.name == "stand-in words":
        size = min(tok.vocab_size, limit or tok.vocab_size)
        return " ".join(f"w{(i * 7 + variant * 13 + 1) % size}" for i in range(n_tokens))
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
    return window.presenter.is_idle()  # the one predicate the tests and docs scripts use too


def pump_until(app, condition, timeout_s: float = 600.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while not condition():
        app.processEvents()
        if time.perf_counter() > deadline:
            raise TimeoutError("the window did not finish in time")
        time.sleep(0.0005)
