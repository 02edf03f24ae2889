"""The GUI thread first: background work (the forward pass, the panels' preparation, the progressive
views) runs at a lower CPU priority than the GUI thread, so that on a machine with few cores the GUI
thread is not left waiting for a CPU while torch keeps every core busy (issue 21: a GUI stall <= 50 ms).

Linux keeps a nice value per thread, and a thread starts with its creator's. The workers are QThreadPool
threads the GUI thread starts (nice 0), and torch's OpenMP threads are made once per thread that first
runs a parallel region, by that thread, and keep the nice value it had then. So ``background()`` does not
only lower its own thread: it raises every thread of the process but the GUI thread to at least the GUI
thread's nice + ``NICE`` (OpenMP threads made earlier, other pool threads, Qt's helper threads), and never
lowers a thread (an unprivileged process cannot, and compare's second model runs lower still). The
workers call it before they run the model (``run_trace``, ``prepare_panels``, the progressive lane's jobs).

Nice values rank threads of one scheduling group: with autogroup or per-application cgroups (desktop
Linux), the app's share of the CPU against other programs does not change; inside it the GUI thread wins.
Elsewhere (macOS, Windows) nothing is done.
"""

from __future__ import annotations

import os
import sys
import threading

LINUX = sys.platform.startswith("linux")
NICE = 10  # the workers' nice value above the GUI thread's (weight 110 against 1024 per thread)

_gui_tid: int | None = None


def gui_thread_id() -> int | None:
    """The native id of the GUI thread (the main thread, where the QApplication lives)."""
    return _gui_tid if _gui_tid is not None else threading.main_thread().native_id


def set_gui_thread(tid: int | None = None) -> None:
    """Say which thread is the GUI thread (default: the calling one); it is never lowered."""
    global _gui_tid
    _gui_tid = threading.get_native_id() if tid is None else tid


def threads() -> list[int]:
    """The native ids of every thread of the process (Linux; else none)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return []


def nice_of(tid: int) -> int | None:
    """A thread's nice value (Linux), None if it cannot be read (gone, or not Linux)."""
    if not LINUX:  # elsewhere a native thread id is no process id: getpriority would read something else
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (AttributeError, OSError):
        return None


def background(nice: int = NICE) -> list[int]:
    """Every thread of the process but the GUI thread to at least the GUI thread's nice + ``nice``
    (at most 19). Returns the ids of the threads it lowered (none off Linux). Cheap: a listing of
    ``/proc/self/task`` and two system calls per thread."""
    gui = gui_thread_id()
    base = nice_of(gui) if gui is not None else None
    if base is None or not hasattr(os, "setpriority"):
        return []
    target = min(19, base + nice)
    lowered = []
    for tid in threads():
        if tid == gui:
            continue
        current = nice_of(tid)
        if current is None or current >= target:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, target)
        except OSError:  # the thread ended meanwhile
            continue
        lowered.append(tid)
    return lowered


def lower_this_thread(nice: int) -> None:
    """The calling thread (not the GUI thread) to at least the GUI thread's nice + ``nice``: for work
    below the workers themselves (compare's second model, started beside the first one's pass)."""
    tid = threading.get_native_id()
    gui = gui_thread_id()
    base = nice_of(gui) if gui is not None else None
    current = nice_of(tid)
    if tid == gui or base is None or current is None:
        return
    target = min(19, base + nice)
    if current < target:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, target)
        except OSError:
            pass
