"""The typed records the ``Presenter`` (``presenter.py``) takes and gives (no Qt): where a trace came from
(``Source``), what one panel asked for when the trace was requested (``PanelRequest``), what is on screen
(``Frame``) and how long a step of the drawing took (``Timing``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.core.trace import Trace

# the kinds of trace source
PROMPT = "prompt"          # a forward pass of the prompt box's text (typing, a sample, a generated token)
STEP = "timeline step"     # a step of a generation's timeline, cut from the whole sequence's trace
FILE = "trace file"        # File > Open trace
REMOTE = "remote trace"    # Models > Trace a remote model (nnsight / NDIF)
COMPARISON = "comparison"  # a second model's trace of the shown ids and the comparison (Models > Compare…)


@dataclass(frozen=True, eq=False)
class Source:
    """Where a trace came from: its ``kind`` (above), the prompt ``text`` it is of, the request id of a
    prompt pass (0 for other sources), the token ids it was pinned to (None: the text encoded), a label
    (a path, "NDIF: model", "step 3 of 10") and when it was asked for (``time.perf_counter``)."""

    kind: str
    text: str = ""
    request_id: int = 0
    ids: tuple[int, ...] | None = None
    label: str = ""
    requested_at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True, eq=False)
class PanelRequest:
    """One panel's ``prepare`` with the snapshot (selection, options) taken on the GUI thread when the
    trace was asked for; called on a worker: ``request(trace)`` -> the panel's view (or None)."""

    panel: str  # the panel id (``explorer.ui.panels.registry``)
    snapshot: Any
    prepare: Callable[[Trace, Any], Any]

    def __call__(self, trace: Trace) -> Any:
        return self.prepare(trace, self.snapshot)


@dataclass(frozen=True, eq=False)
class Frame:
    """What the panels show: the trace, its baseline (the same ids without interventions, or None), the
    views prepared for it by panel id (those known so far: ``shown`` carries the first panel's, ``drawn``
    every shown panel's), where it came from, and the worker's seconds before it arrived."""

    trace: Trace
    baseline: Trace | None
    views: Mapping[str, Any]
    source: Source
    worker_seconds: float = 0.0
    extra: Any = None  # what a comparison frame adds (its CompareResult)


@dataclass(frozen=True)
class Timing:
    """One timed step (``time.perf_counter`` seconds): ``what`` is "shown" (the frame's arrival: every
    ``shown`` listener), "draw" (a panel's ``set_trace``; ``painted``: after its repaint), "drawn" (from
    the request to every shown panel drawn), "compute" (a progressive view on the lane's worker) or
    "apply" (its result applied on the GUI thread); ``name`` the panel id or the view."""

    what: str
    name: str
    start: float
    end: float
    painted: float | None = None

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000
