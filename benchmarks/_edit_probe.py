"""benchmarks/ui.py's look inside an edit: each progressive view's compute (on the lane's worker) and
apply (on the GUI thread), and which GUI-thread slot (a panel's drawing, a view's apply, the trace's
arrival, a garbage collection) ran across each edit's longest heartbeat gap, and where the GUI thread was
during that gap (``GuiCpu``: on a CPU, runnable but waiting for one, or asleep)."""

from __future__ import annotations

import statistics
import threading
import time


class GuiCpu:
    """The GUI thread's own scheduling at each heartbeat: its CPU time and, on Linux, the time it was
    runnable but waiting for a CPU (``/proc/self/task/<tid>/schedstat``'s wait nanoseconds; 0 off Linux).
    Across a gap between two beats, run + wait + asleep = the gap: *run* is Qt's events and paints and
    our slots, *wait* is CPU starvation (other threads, ours or not, on every core), *asleep* is the
    GUI thread blocked (the benchmark pump's sleeps, the GIL, a lock)."""

    def __init__(self, beat, controller) -> None:
        self.path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self.samples: list[tuple[float, float, float]] = []  # (perf_counter, run ms, wait ms)
        self.beat, self.timer = beat, beat.timer
        # the beat and its sample in one slot, at one instant (a second slot can run much later on a busy machine)
        self.timer.timeout.disconnect()
        self.timer.timeout.connect(self.beat_and_sample)
        self.controller = controller
        controller.requested.connect(self.sample)  # the edit's start (t0), before the first beat

    def beat_and_sample(self) -> None:
        t = time.perf_counter()
        self.beat.beats.append(t)
        self.sample(at=t)

    def sample(self, *_args, at: float | None = None) -> None:
        now = time.perf_counter() if at is None else at
        run = time.thread_time() * 1000  # exact now (schedstat's run time can lag a tick for a running thread)
        try:
            with open(self.path) as f:
                wait = int(f.read().split()[1]) / 1e6
        except (OSError, ValueError, IndexError):  # not Linux: the thread's CPU time only
            wait = 0.0
        self.samples.append((now, run, wait))

    def split(self, a: float, b: float) -> tuple[float, float, float] | None:
        """(run, wait, asleep) ms of the GUI thread from ``a`` to ``b`` (the samples nearest each)."""
        if len(self.samples) < 2:
            return None
        sa = min(self.samples, key=lambda s: abs(s[0] - a))
        sb = min(self.samples, key=lambda s: abs(s[0] - b))
        if sb[0] <= sa[0]:
            return None
        span = (sb[0] - sa[0]) * 1000
        run, wait = sb[1] - sa[1], sb[2] - sa[2]
        return run, wait, max(0.0, span - run - wait)

    def stop(self) -> None:
        self.timer.timeout.disconnect(self.beat_and_sample)
        beats = self.beat.beats
        self.timer.timeout.connect(lambda: beats.append(time.perf_counter()))  # the heartbeat's own slot again
        self.controller.requested.disconnect(self.sample)


class JobTimes:
    """Each progressive view's time (``explorer.ui.session.progressive``): computing on the lane's worker,
    applying on the GUI thread; and, per edit, the GUI-thread slot that ran across the longest heartbeat gap."""

    def __init__(self, window, beat=None) -> None:
        self.cpu = GuiCpu(beat, window.controller) if beat is not None else None
        self.gaps: list[tuple[float, tuple[float, float, float] | None, str, float]] = []  # per counted edit
        self.whole: list[tuple[float, float, float]] = []  # per counted edit: the GUI thread over the whole edit

        self.compute: dict[str, list[float]] = {}
        self.apply: dict[str, list[float]] = {}
        self.events: list[tuple[str, float, float]] = []  # (what, start, end) on the GUI thread
        self.longest: dict[str, list[float]] = {}  # what ran across an edit's longest gap: that gap's ms
        self.presenter = window.presenter

        def timed(timing) -> None:  # the presenter's timing signal (explorer.ui.session.frame.Timing)
            if timing.what == "compute":  # on the lane's worker
                self.compute.setdefault(timing.name, []).append(timing.ms)
            elif timing.what == "apply":
                self.apply.setdefault(timing.name, []).append(timing.ms)
                self.events.append((f"apply {timing.name}", timing.start, timing.end))
            elif timing.what == "draw":  # a panel's set_trace and its repaint
                panel = window.panel(timing.name)
                title = panel.title if panel is not None else timing.name
                self.events.append((f"draw {title}", timing.start, timing.painted or timing.end))
            elif timing.what == "shown":  # shown's slots: the status, the token count, the comparison's start...
                self.events.append(("the trace's arrival (every shown slot)", timing.start, timing.end))

        self._timed = timed
        window.presenter.timed.connect(timed)
        import gc
        import threading

        self._gc_start = 0.0

        def collected(phase: str, info: dict) -> None:  # the garbage collector's pauses on the GUI thread
            if threading.current_thread() is not threading.main_thread():
                return
            if phase == "start":
                self._gc_start = time.perf_counter()
            else:
                self.events.append((f"garbage collection (generation {info.get('generation')})", self._gc_start,
                                    time.perf_counter()))

        self._collected = collected
        gc.callbacks.append(collected)
        from explorer.core import memory

        self.memory, self._trim = memory, memory.release_freed_memory
        self.trims: list[tuple[float, float]] = []  # glibc's malloc_trim on a worker: it holds the allocator's locks
        self.trim_ms: list[float] = []

        def trim(_trim=self._trim):
            t = time.perf_counter()
            try:
                return _trim()
            finally:
                self.trims.append((t, time.perf_counter()))
                self.trim_ms.append((self.trims[-1][1] - t) * 1000)

        memory.release_freed_memory = trim

    def edit_done(self, t0: float, t1: float, beat, counted: bool = True) -> None:
        if self.cpu is not None:
            self.cpu.sample()  # the edit's end (t1)
        if not counted:
            self.events.clear()
            return
        beats = [t0] + [b for b in beat.beats if t0 <= b <= t1] + [t1]
        gap, a, b = max(((y - x) * 1000, x, y) for x, y in zip(beats, beats[1:]))
        inside = [((min(e, b) - max(s, a)) * 1000, what) for what, s, e in self.events if s < b and e > a]
        took, what = max(inside) if inside else (0.0, "(no drawing, view or collection recorded)")
        self.longest.setdefault(what, []).append((gap, took))
        trimmed = sum(max(0.0, min(e, b) - max(s, a)) for s, e in self.trims) * 1000
        if trimmed:
            what = f"{what}; malloc_trim on a worker {trimmed:.1f} ms of it"
        self.trims = [t for t in self.trims if t[1] > t1]
        if self.cpu is not None:
            self.gaps.append((gap, self.cpu.split(a, b), what, took))
            whole = self.cpu.split(t0, t1)
            if whole is not None:
                self.whole.append(whole)
            self.cpu.samples = self.cpu.samples[-1:]
        self.events.clear()

    def stop(self) -> None:
        import gc

        if self.cpu is not None:
            self.cpu.stop()
        gc.callbacks.remove(self._collected)
        self.memory.release_freed_memory = self._trim
        self.presenter.timed.disconnect(self._timed)

    def report(self) -> None:
        for name, values in sorted(self.compute.items(), key=lambda kv: -statistics.median(kv[1])):
            applied = self.apply.get(name, [0.0])
            print(f"      view {name:<40} compute {statistics.median(values):7.1f} ms on the worker, "
                  f"apply {statistics.median(applied):5.1f} ms (max {max(applied):.1f}) on the GUI thread")
        for what, gaps in sorted(self.longest.items(), key=lambda kv: -max(kv[1])[0]):
            gap, took = max(gaps)
            print(f"      longest gap of an edit: {what} ran across it ({len(gaps)} edits; gap up to {gap:.1f} ms, "
                  f"{took:.1f} ms of it in that slot, the rest unrecorded: Qt's own events and paints, "
                  "or no CPU for the GUI thread)")
        for i, (gap, split, what, took) in enumerate(self.gaps):
            if split is None:
                continue
            run, wait, asleep = split
            print(f"      edit {i + 1}'s longest gap {gap:6.1f} ms: the GUI thread ran {run:5.1f} ms ({what}: "
                  f"{took:.1f} ms), waited for a CPU {wait:5.1f} ms, slept {asleep:5.1f} ms")
        if self.trim_ms:
            print(f"      malloc_trim (freed memory back to the OS, on a worker, after an edit): {len(self.trim_ms)} "
                  f"calls, median {statistics.median(self.trim_ms):.1f} ms, max {max(self.trim_ms):.1f} ms")
        if self.whole:
            run, wait, asleep = (statistics.median(w[i] for w in self.whole) for i in range(3))
            print(f"      the GUI thread over a whole edit (medians): ran {run:.1f} ms, "
                  f"waited for a CPU {wait:.1f} ms, slept {asleep:.1f} ms")
