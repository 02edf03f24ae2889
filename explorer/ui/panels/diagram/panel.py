"""The model as a diagram: the open model's own architecture as a data flow, with live numbers.

``explorer.core.diagram`` lists the boxes (shapes at the current n, Trace keys, the panel that shows
each in full) and computes each box's summary for the selected token; this panel draws them
(``scene.DiagramScene``): the selected block in full, the others collapsed, a layer strip above.
Clicking a box selects its layer, the head and the token and shows its panel (``Session.show_panel``).
"Follow this token…" opens the tour (``tour.TourDialog``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from explorer.core.diagram import Box, Diagram, Summary, box_summary, build_diagram, summary_keys
from explorer.core.diagram.summaries import stream_norms, vocab_ready
from explorer.core.diagram.tour import TourStep, tour_steps
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView, clamp_token
from explorer.ui.panels.diagram.scene import DiagramScene, DiagramView, layout_of
from explorer.ui.panels.diagram.strip import LayerStrip
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.steady_label import SteadyLabel

CHEAP_ELEMENTS = 1 << 22  # n × d_ff under this: summaries on the GUI thread at once, else in the background
VOCAB_NOW = 1 << 16  # a vocabulary up to this: the un-embedding's summary with the others, else on a worker
COMPUTING = Summary("computing\u2026")
AHEAD_PRIORITY = 5  # the neighbouring layers' summaries: after every other view on the lane


@dataclass(frozen=True)
class DiagramPanelView(PanelView):
    diagram: Diagram | None = None
    layer: int = 0
    head: int = 0
    token: int = 0
    summaries: dict[str, Summary] = field(default_factory=dict)
    stream: tuple[float, ...] = ()  # the stream's norm at the token entering each block, and after the last
    pending: tuple[str, ...] = ()  # boxes whose summary is being computed on a worker ("computing…")


def block_kinds(cfg: Any) -> tuple[str, ...]:
    """Each block's token mixer in a word, for the layer strip, where the model's blocks differ (else ())."""
    from explorer.core.analysis.layer_maps import short_kind, uniform

    return () if uniform(cfg) else tuple(short_kind(cfg, layer) for layer in range(cfg.n_layers))


def diagram_of(trace: Trace) -> Diagram:
    return trace.memo(("diagram",), lambda: build_diagram(trace.config, trace.n_tokens))


def summaries_of(trace: Trace, layer: int, head: int, token: int, tokenizer: Any,
                 previous: DiagramPanelView | None = None, defer_vocab: bool = False) -> DiagramPanelView:
    """Every drawn box's summary for ``token`` (worker-safe: the trace and these values only).

    ``previous``: the view drawn before, whose summaries are kept where the selection change leaves
    them as they were (the head's and the tail's boxes on a layer or head switch, all but the
    attention boxes on a head switch): a switch computes only what it changes. ``defer_vocab``: a box
    whose summary is vocabulary-sized work not done yet at ``token`` (the un-embedding) says
    "computing…" and is listed in ``pending`` (the panel computes it on a worker)."""
    diagram = diagram_of(trace)
    layer = min(max(layer, 0), trace.config.n_layers - 1)
    t = clamp_token(token, trace.n_tokens)
    block = diagram.block(layer)
    if previous is not None and previous.trace is trace and previous.token == t:
        summaries = {b.id: s for b, s in ((b, previous.summaries.get(b.id)) for b in diagram.head() + diagram.tail())
                     if s is not None and b.id not in previous.pending}
        same_head = previous.head == head
        if previous.layer != layer:
            trace.materialize([b.key for b in block if b.key is not None and b.kind != "scores" and b.key in trace])
        for b in block:
            kept = previous.summaries.get(b.id) if previous.layer == layer else None
            if kept is not None and (same_head or b.kind not in ("qkv", "scores")):
                summaries[b.id] = kept
        boxes = [b for b in diagram.head() + block + diagram.tail() if b.id not in summaries]
        stream = previous.stream
    else:
        trace.materialize(summary_keys(diagram, layer, trace))
        summaries, boxes, stream = {}, diagram.head() + block + diagram.tail(), stream_norms(trace, t)
    pending = tuple(b.id for b in boxes if defer_vocab and not vocab_ready(b, trace, t))
    summaries.update({b.id: COMPUTING if b.id in pending else box_summary(b, trace, t, head, tokenizer) for b in boxes})
    return DiagramPanelView(trace, diagram, layer, head, t, summaries, stream, pending)


class DiagramPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.view: DiagramPanelView | None = None
        top = QHBoxLayout()
        self.caption = SteadyLabel()  # the token's text in it changes its length: the height is kept
        self.tour_button = QPushButton("Follow this token…")
        self.tour_button.setToolTip("A guided tour of the selected token through this model, step by step, "
                                    "with this prompt's numbers")
        self.tour_button.clicked.connect(self.open_tour)
        top.addWidget(self.caption, 1)
        top.addWidget(self.tour_button)
        self.body.addLayout(top)
        self.strip = LayerStrip()
        self.strip.layer_clicked.connect(self.selection.set_layer)
        self.body.addWidget(self.strip)
        self._diagram: Diagram | None = None
        self._scenes: dict[tuple, DiagramScene] = {}  # per layout of a block (scene.layout_of), for the diagram shown
        self.scene = self._new_scene()
        self.graphics = DiagramView(self.scene)
        self.body.addWidget(self.graphics, 1)
        self.tour: Any = None
        self._ahead: dict[int, DiagramPanelView] = {}  # per layer: summaries computed ahead (layer ± 1), this trace
        # the computation ahead is asked for once the switch's events are done (the other panels' drawing,
        # the paint): a worker started inside the switch would take the GIL from the GUI thread's drawing
        self._ahead_timer = QTimer(self)
        self._ahead_timer.setSingleShot(True)
        self._ahead_timer.setInterval(0)
        self._ahead_timer.timeout.connect(self._start_ahead)

    # --- the contract ------------------------------------------------------------------------
    def needed_keys(self, trace: Trace, snapshot: PanelSnapshot) -> list[str]:
        layer = min(snapshot.layer, trace.config.n_layers - 1)
        return summary_keys(diagram_of(trace), layer, trace)

    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> DiagramPanelView:
        return summaries_of(trace, snapshot.layer, snapshot.head, snapshot.token, snapshot.tokenizer)

    def draw(self, view: PanelView) -> None:
        assert isinstance(view, DiagramPanelView) and view.diagram is not None
        self.view = view
        cfg = view.diagram.config
        stale: list[DiagramScene] = []
        if self._diagram is not view.diagram:  # a new model or prompt length: the scenes drawn are stale
            stale = [*self._scenes.values(), self.scene]
            self._diagram, self._scenes = view.diagram, {}
        layout = layout_of(view.diagram, view.layer)
        scene = self._scenes.get(layout)
        if scene is None:  # one scene per layout of a block (first, middle, last), built once per diagram
            scene = self._scenes[layout] = self._new_scene()
            scene.build(view.diagram, view.layer)
        else:  # a layer switch moves the scene to the block: its boxes are kept, not rebuilt
            scene.move_to(view.diagram, view.layer)
        if scene is not self.scene:
            self.scene = scene
            self.graphics.setScene(scene)
            bar = self.graphics.verticalScrollBar()
            bar.setValue(int(self.graphics.mapFromScene(0, scene.block_top).y()) + bar.value())
        for old in {id(x): x for x in stale if x is not scene}.values():
            old.deleteLater()  # owned by this panel: freed once no view shows it
        for box_id, item in self.scene.items_by_id.items():
            item.set_summary(view.summaries.get(box_id))
        for strip in self.scene.strips:
            part = view.stream[strip.first: strip.last + 2]
            strip.set_summary(Summary(f"stream ‖x‖ {part[0]:.3g} → {part[-1]:.3g}" if part else "", None, part))
        self.strip.set_state(cfg.n_layers, view.layer, view.stream[1:], block_kinds(cfg))
        token = view.trace.tokens[view.token] if view.trace.n_tokens else ""
        self._set_caption(f"{cfg.arch}: {cfg.n_layers} blocks, n = {view.diagram.n} tokens. Numbers for "
                             f"token #{view.token} {token!r}, head {view.head}. Click a box to open its panel.")
        s = self.selection
        now = (min(s.layer, cfg.n_layers - 1), s.head, clamp_token(s.token, view.trace.n_tokens))
        if self.trace is view.trace and now != (view.layer, view.head, view.token):
            self.selection_changed("layer")  # the selection moved after this view's snapshot was taken

    def selection_changed(self, what: str) -> None:
        trace, s = self.trace, self.selection
        if trace is None:
            return
        cheap = trace.n_tokens * max(trace.config.d_ff, trace.config.d_model) <= CHEAP_ELEMENTS
        tokenizer = self.tokenizer
        previous = self.view if self.view is not None and self.view.trace is trace else None
        layer, head, token = s.layer, s.head, s.token  # the selection now (the compute may run on a worker)
        defer = cheap and trace.config.vocab_size > VOCAB_NOW  # on the GUI thread: no vocabulary-sized work
        ahead = self._ahead_for(trace, min(max(layer, 0), trace.config.n_layers - 1), clamp_token(token, trace.n_tokens))
        if ahead is not None:  # computed ahead: its block's summaries kept (the head's boxes again if it changed)
            previous = ahead
        self.now_or_later("summaries", cheap,
                          lambda _check: summaries_of(trace, layer, head, token, tokenizer, previous, defer),
                          self._drawn_then_pending)

    def _ahead_for(self, trace: Trace, layer: int, token: int) -> DiagramPanelView | None:
        """The summaries computed ahead for ``layer`` at ``token`` of ``trace``, with the head's and the
        tail's boxes as the view shown has them (an un-embedding computed since), or None."""
        ahead, shown = self._ahead.get(layer), self.view
        if ahead is None or ahead.trace is not trace or ahead.token != token:
            return None
        if shown is not None and shown.trace is trace and shown.token == token and ahead.pending:
            done = {i: shown.summaries[i] for i in ahead.pending if i not in shown.pending and i in shown.summaries}
            ahead = replace(ahead, summaries={**ahead.summaries, **done},
                            pending=tuple(i for i in ahead.pending if i not in done))
        return ahead

    def computing(self) -> bool:
        return super().computing() or self._ahead_timer.isActive()

    def _start_ahead(self) -> None:
        if self.view is not None:
            self._compute_ahead(self.view)

    def _compute_ahead(self, view: DiagramPanelView) -> None:
        """After ``view`` is drawn, compute the neighbouring layers' summaries (layer ± 1, this head and
        token) in the background, lowest priority, so that a switch to one of them only draws (the same
        ``summaries_of``: exact values). Only where the summaries are computed on the GUI thread."""
        trace = view.trace
        if trace is None or trace.n_tokens * max(trace.config.d_ff, trace.config.d_model) > CHEAP_ELEMENTS:
            return
        if any(v.trace is not trace for v in self._ahead.values()):
            self._ahead = {}
        layers = [x for x in (view.layer + 1, view.layer - 1) if 0 <= x < trace.config.n_layers
                  and not ((a := self._ahead.get(x)) is not None and a.token == view.token and a.head == view.head)]
        if not layers:
            return
        tokenizer, defer = self.tokenizer, trace.config.vocab_size > VOCAB_NOW
        known = dict(self._ahead)  # taken on the GUI thread: the worker reads no state of the panel

        def compute(check: Any) -> list[DiagramPanelView]:
            got = []
            for x in layers:
                check()
                kept = known.get(x)  # this layer's block kept if it is at this token
                previous = kept if kept is not None and kept.trace is trace and kept.token == view.token else view
                got.append(summaries_of(trace, x, view.head, view.token, tokenizer, previous, defer))
            return got

        def apply(got: list[DiagramPanelView]) -> None:
            for v in got:
                self._ahead[v.layer] = v

        self.later(("ahead",), compute, apply, priority=AHEAD_PRIORITY)

    def _drawn_then_pending(self, view: DiagramPanelView) -> None:
        """Draw ``view``, then compute its pending summaries (the un-embedding at a new token) on a worker
        and draw them where the view shown is still at that token; then the neighbouring layers' ahead."""
        self.draw(view)
        if self.view is view:
            self._ahead[view.layer] = view
            self._ahead_timer.start()  # _compute_ahead once the switch's events are done
        if not view.pending or self.view is not view:
            return
        trace, t, head, tokenizer = view.trace, view.token, view.head, self.tokenizer
        boxes = [b for b in view.diagram.boxes if b.id in view.pending]

        def apply(got: dict[str, Summary]) -> None:
            shown = self.view
            if shown is None or shown.trace is not trace or shown.token != t or not shown.pending:
                return
            self.view = replace(shown, summaries={**shown.summaries, **got},
                                pending=tuple(i for i in shown.pending if i not in got))
            for box_id, summary in got.items():  # only these boxes change
                item = self.scene.items_by_id.get(box_id)
                if item is not None:
                    item.set_summary(summary)

        self.later(("pending",), lambda _check: {b.id: box_summary(b, trace, t, head, tokenizer) for b in boxes}, apply)

    def _set_caption(self, text: str) -> None:
        if self.caption.text() != text:
            self.caption.setText(text)

    def _new_scene(self) -> DiagramScene:
        scene = DiagramScene(self)
        scene.on_box = self.open_box
        scene.on_layer = self.selection.set_layer
        return scene

    # --- clicks ------------------------------------------------------------------------------
    def open_box(self, box: Box) -> None:
        """Select the box's layer, the head (attention boxes) and the token, and show the box's panel."""
        head = self.selection.head if box.kind in ("qkv", "scores") else None
        token = self.selected_token
        if self.session is not None:
            self.session.show_panel(box.panel, box.layer, head, token)
            return
        if box.layer is not None:
            self.selection.set_layer(box.layer)
        self.selection.set_token(token)

    def open_tour(self) -> None:
        """Open the tour of the selected token: the window says "computing…" while its steps are computed
        on the panel's lane (``later``, ahead of the other views), then shows them. A new trace before they
        come asks again for it (``set_trace``)."""
        from explorer.ui.panels.diagram.tour import TourDialog

        if self.trace is None:
            return
        if self.tour is None:
            self.tour = TourDialog(self)
        trace, token = self.trace, self.selected_token
        layer, head, tokenizer = self.selection.layer, self.selection.head, self.tokenizer
        self.tour.wait(token, trace.tokens[token] if trace.n_tokens else "")
        self.tour.show()
        self.tour.raise_()

        def compute(_check: Any) -> list[TourStep] | str:
            try:
                return tour_steps(trace, token, layer, head, tokenizer)
            except KeyError as exc:  # a trace read from a file without the values a step shows
                return f"The tour cannot start on this trace: {exc.args[0] if exc.args else exc}"

        self.later(("tour",), compute, self._show_tour, priority=-1)

    def _show_tour(self, steps: list[TourStep] | str) -> None:
        if self.tour is None:
            return
        if isinstance(steps, str):
            self.tour.close()
            self.caption.setText(steps)
            return
        self.tour.show_steps(steps, self.trace.tokens[steps[0].token] if self.trace is not None else "", self.session)

    def set_trace(self, trace: Trace, view: PanelView | None = None) -> None:
        if trace is not self.trace:
            self._ahead = {}  # the old trace's summaries computed ahead
        super().set_trace(trace, view)
        if self.tour is not None and self.tour.isVisible() and self.tour.waiting:  # its job went with the old trace
            self.open_tour()
