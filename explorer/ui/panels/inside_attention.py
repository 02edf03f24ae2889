"""Inside attention, for learners: the matrices the textbook writes, with this prompt's numbers.

Three tabs (``core/analysis/inside_attention.py`` computes each on the worker):

* **Q, K, V**: the selected head's queries, keys and values as matrices over the prompt (one row per token,
  one column per dimension of the head), and its scores Q K^T * scale, the softmax of whose rows is the
  attention pattern; the selected token's row outlined.
* **Heads -> W_O**: every head's output side by side (the concatenation, [n, H * d_head]) and its product with
  W_O, which is what the layer adds to the residual stream (or hands to an output norm first).
* **KV cache**: during a generation's timeline, what the cache holds while the step's token is produced: the
  keys and values of every position before it, the rows this step computed (outlined) and those it read back,
  and the cache's size. Without a timeline, the cache right after reading the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtWidgets import QHBoxLayout, QTabWidget, QVBoxLayout, QWidget

from explorer.core.analysis.inside_attention import (
    HeadQKV, HeadsToOutput, KVCacheStep, head_qkv, heads_to_output, kv_cache_at, kv_head_of)
from explorer.core.budget import format_size
from explorer.core.display.labels import token_labels
from explorer.core.trace import Trace
from explorer.ui.panels.base import Panel, PanelSnapshot, PanelView, clamp_token
from explorer.ui.session.selection import Selection
from explorer.ui.widgets.heatmap import Heatmap
from explorer.ui.widgets.heatmap_image import HeatmapImage, heatmap_image
from explorer.ui.widgets.plots import outline
from explorer.ui.widgets.steady_label import SteadyLabel

SELECTED = pg.mkPen("#ff2d55", width=1.5, cosmetic=True, style=Qt.PenStyle.DashLine)
NEW_ROWS = pg.mkPen("#ff8c00", width=2.5, cosmetic=True)
TABS = ("Q, K, V", "Heads \u00d7 W\u2092", "KV cache")  # (an underscore in a tab title is cut below the baseline)
MAP_MIN_PX = 170  # three maps side by side fit the dock of a 1280x800 window
NOW_TOKENS = 512  # up to this many tokens a layer or head switch prepares the score map on the GUI thread


@dataclass(frozen=True)
class InsideView(PanelView):
    """The three tabs' values (None with the line saying why where a tab has nothing)."""

    layer: int = 0
    head: int = 0
    qkv: HeadQKV | None = None
    heads: HeadsToOutput | None = None
    cache: KVCacheStep | None = None
    why: str = ""
    cache_note: str = ""
    images: dict[str, HeatmapImage] | None = None  # maps ready to show, prepared here on the worker (long prompts)

    def image(self, name: str, matrix: np.ndarray) -> np.ndarray | HeatmapImage:
        """The map ``name`` as prepared on the worker, else ``matrix`` itself (the heatmap prepares it then)."""
        return (self.images or {}).get(name, matrix)


def inside_view(trace: Trace, snapshot: PanelSnapshot) -> InsideView:
    """On the worker: the selected head's matrices, the layer's projection and the cache at the timeline's step."""
    cfg = trace.config
    layer, head = min(snapshot.layer, cfg.n_layers - 1), snapshot.head
    if not cfg.layer(layer).is_attention:
        return InsideView(trace, layer, head, why=f"Layer {layer} is not an attention layer: it keeps a recurrent "
                                                  "state instead of queries, keys and values. Choose another layer.")
    try:
        qkv = trace.memo(("inside.qkv", layer, head), lambda: head_qkv(trace, layer, head))
    except (ValueError, KeyError) as exc:
        return InsideView(trace, layer, head, why=str(exc))
    try:  # W_O is the model's: a trace opened from a file has none
        heads = trace.memo(("inside.heads", layer), lambda: heads_to_output(trace, layer))
    except (ValueError, KeyError):
        heads = None
    step = snapshot.timeline
    g = kv_head_of(trace, layer, head)
    itemsize = 4
    if step is not None and step.n_prompt + step.step == trace.n_tokens:
        cache = kv_cache_at(trace, step.n_prompt, step.step, layer, g, itemsize)
        note = ""
    else:
        cache = kv_cache_at(trace, trace.n_tokens, 0, layer, g, itemsize)
        note = (" Generate a continuation (the Generation pane) and step through it with the timeline to see the "
                "cache grow: one new row a step, every earlier row read back.")
    return InsideView(trace, layer, head, qkv, heads, cache, "", note, _prepared(trace.n_tokens, qkv, heads, cache))


def _prepared(n: int, qkv: HeadQKV, heads: HeadsToOutput | None, cache: KVCacheStep | None) -> dict[str, HeatmapImage]:
    """The maps prepared for the heatmaps off the GUI thread: the score map always (n x n), and with a long prompt
    every map (the diverging ones symmetric about 0, as their heatmaps are)."""
    images = {"scores": heatmap_image(qkv.scores, overlay=n > NOW_TOKENS)}  # (a short prompt's hatching is kept)
    if n > NOW_TOKENS:
        named = {"q": qkv.q, "k": qkv.k, "v": qkv.v}
        if heads is not None:
            named.update(concat=heads.concat, out=heads.out)
        if cache is not None:
            named.update(cache_k=cache.keys, cache_v=cache.values)
        images.update({name: heatmap_image(m, symmetric=True) for name, m in named.items()})
    return images


class InsideAttentionPanel(Panel):
    def __init__(self, selection: Selection, parent: QWidget | None = None) -> None:
        super().__init__(selection, parent)
        self.view: InsideView | None = None
        self.tabs = QTabWidget(self)
        self.body.addWidget(self.tabs, 1)
        # Q, K, V
        self.qkv_note = SteadyLabel()
        self.q_map, self.k_map, self.v_map = (Heatmap(colormap="CET-D1", symmetric=True, title=t) for t in ("Q", "K", "V"))
        self.scores_map = Heatmap(colormap="viridis", title="scores = Q K\u1d40 \u00d7 scale")
        self._tab(0, self.qkv_note, [self.q_map, self.k_map, self.v_map], below=self.scores_map)
        # heads concatenated, times W_O
        self.heads_note = SteadyLabel()
        # short titles, on two lines (a laptop's three maps side by side are ~70 px wide: a longer title was
        # elided to 'Q, head …'); which head they are is the line above the maps
        self.concat_map = Heatmap(colormap="CET-D1", symmetric=True, title="heads side by side<br>(concatenated)")
        self.out_map = Heatmap(colormap="CET-D1", symmetric=True, title="\u00d7 W_O:<br>what the layer adds")
        self._tab(1, self.heads_note, [self.concat_map, self.out_map])
        # the KV cache
        self.cache_note = SteadyLabel()
        self.cache_k, self.cache_v = (Heatmap(colormap="CET-D1", symmetric=True, title=t) for t in
                                      ("keys<br>in the cache", "values<br>in the cache"))
        self._tab(2, self.cache_note, [self.cache_k, self.cache_v])
        self._selected = {id(m): outline(m.plot, SELECTED, z=30, visible=False)
                          for m in (self.q_map, self.k_map, self.v_map, self.concat_map, self.out_map)}
        self._new = {id(m): outline(m.plot, NEW_ROWS, z=31, visible=False) for m in (self.cache_k, self.cache_v)}
        for m in (self.q_map, self.k_map, self.v_map, self.concat_map, self.out_map, self.cache_k, self.cache_v):
            m.cell_clicked.connect(lambda row, _col: self.selection.set_token(row))
        self.scores_map.cell_clicked.connect(lambda row, _col: self.selection.set_token(row))
        for name, m in (("Q of the selected head", self.q_map), ("K of the selected head", self.k_map),
                        ("V of the selected head", self.v_map), ("scores of the selected head", self.scores_map),
                        ("heads concatenated", self.concat_map), ("heads times W_O", self.out_map),
                        ("keys in the KV cache", self.cache_k), ("values in the KV cache", self.cache_v)):
            self.add_exportable(name, m, lambda m=m: (m.matrix, m.row_labels, m.col_labels))

    def _tab(self, index: int, note: SteadyLabel, maps: list[Heatmap], below: Heatmap | None = None) -> None:
        """A tab: its line, its maps side by side (narrow enough for three in a laptop's dock), one more below."""
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(note)
        row = QHBoxLayout()
        for m in maps:
            m.setMinimumWidth(MAP_MIN_PX)
            row.addWidget(m, 1)
        layout.addLayout(row, 1)
        if below is not None:
            layout.addWidget(below, 1)
        self.tabs.addTab(page, TABS[index])

    @classmethod
    def applies_to(cls, config: Any) -> bool:
        return any(config.layer(layer).is_attention for layer in range(config.n_layers))

    # --- the panel contract ----------------------------------------------------------------------
    def prepare(self, trace: Trace, snapshot: PanelSnapshot) -> InsideView:
        super().prepare(trace, snapshot)
        return inside_view(trace, snapshot)

    def draw(self, view: InsideView) -> None:
        self.view = view
        tokens = token_labels(view.trace.tokens)
        if view.qkv is None:
            for note in (self.qkv_note, self.heads_note, self.cache_note):
                note.setText(view.why)
            for m in (self.q_map, self.k_map, self.v_map, self.scores_map, self.concat_map, self.out_map,
                      self.cache_k, self.cache_v):
                m.set_data(np.zeros((0, 0), np.float32))
            self._draw_token()
            return
        self._draw_qkv(view.qkv, view, tokens)
        self._draw_heads(view.heads, view, tokens)
        self._draw_cache(view.cache, view, tokens, view.cache_note)
        self._draw_token()

    def selection_changed(self, what: str) -> None:
        if what in ("layer", "head") and self.trace is not None:
            trace, snapshot = self.trace, self.snapshot()
            layer = min(snapshot.layer, trace.config.n_layers - 1)
            ready = (trace.memo_get(("inside.qkv", layer, snapshot.head)) is not None
                     and trace.memo_get(("inside.heads", layer)) is not None and trace.n_tokens <= NOW_TOKENS)
            self.now_or_later(("inside",), ready, lambda _check: inside_view(trace, snapshot), self.draw)
        elif what == "token":
            self._draw_token()

    # --- drawing ---------------------------------------------------------------------------------
    def _draw_qkv(self, m: HeadQKV, view: InsideView, tokens: list[str]) -> None:
        dims = [f"d{i}" for i in range(m.q.shape[1])]
        shared = "" if m.kv_head == m.head else f" (shared with the other query heads of K/V head {m.kv_head})"
        self.q_map.set_data(view.image("q", m.q), tokens, dims, value_name="q")
        self.k_map.set_data(view.image("k", m.k), tokens, dims, value_name="k")
        self.v_map.set_data(view.image("v", m.v), tokens, [f"d{i}" for i in range(m.v.shape[1])], value_name="v")
        self.scores_map.set_data(view.image("scores", m.scores), tokens, tokens, value_name="score")
        self.qkv_note.setText(
            f"Head {m.layer}.{m.head}: one row per token, one column per dimension ({m.q.shape[1]}). Row i of Q asks, "
            f"row j of K answers: score(i, j) = Q[i] \u00b7 K[j] \u00d7 {m.scale:.4g}{shared}; the softmax of each row of the "
            "scores is the attention pattern, and the pattern times V is the head's output. Hover for exact values.")

    def _draw_heads(self, h: HeadsToOutput | None, view: InsideView, tokens: list[str]) -> None:
        if h is None:
            self.heads_note.setText("The heads' projection needs the model's W_O: this trace has no model.")
            for m in (self.concat_map, self.out_map):
                m.set_data(np.zeros((0, 0), np.float32))
            return
        H, _n, dv = h.z.shape
        self.concat_map.set_data(view.image("concat", h.concat), tokens,
                                 [f"H{c // dv}.{c % dv}" for c in range(H * dv)], value_name="z")
        self.out_map.set_data(view.image("out", h.out), tokens, [f"d{i}" for i in range(h.out.shape[1])],
                              value_name="output")
        d, width = h.w_o_shape
        after = (f"= the layer's attention output (the stored one: largest difference {h.max_diff:.1e})" if h.matches
                 else "then this family's output norm or scale: the stored attention output differs")
        self.heads_note.setText(
            f"Layer {h.layer}: the {H} heads' outputs (each {dv} wide) side by side make one row of {H * dv} per token; "
            f"times W_O ({width} \u00d7 {d}) it becomes a row of d_model = {d}, {after}. Hover for exact values.")

    def _draw_cache(self, c: KVCacheStep | None, view: InsideView, tokens: list[str], note: str) -> None:
        if c is None:
            return
        rows = tokens[: c.length]
        self.cache_k.set_data(view.image("cache_k", c.keys), rows, [f"d{i}" for i in range(c.keys.shape[1])],
                              value_name="k")
        self.cache_v.set_data(view.image("cache_v", c.values), rows, [f"d{i}" for i in range(c.values.shape[1])],
                              value_name="v")
        new = np.flatnonzero(c.new)
        for m in (self.cache_k, self.cache_v):
            box = self._new[id(m)]
            box.setVisible(new.size > 0)
            if new.size:
                box.setRect(QRectF(0, float(new[0]), float(m.matrix.shape[1]), float(new[-1] - new[0] + 1)))
        if c.step == 0:
            what = f"reading the prompt: all {c.length} positions computed now (outlined), nothing reused yet"
        else:
            what = (f"generated token {c.step} is produced: 1 new position computed (outlined: the token generated "
                    f"last), {c.reused} read back from the cache")
        self.cache_note.setText(
            f"Layer {c.layer}, K/V head {c.kv_head}, {what}. The whole cache holds {c.length} positions \u00d7 "
            f"{format_size(c.bytes_per_token)} (every layer's keys and values, float32) = {format_size(c.nbytes)}."
            + note)

    def _draw_token(self) -> None:
        if self.trace is None:
            return
        i = clamp_token(self.selection.token, self.trace.n_tokens)
        for m in (self.q_map, self.k_map, self.v_map, self.concat_map, self.out_map):
            box = self._selected[id(m)]
            rows, cols = m.matrix.shape if m.matrix.ndim == 2 else (0, 0)
            box.setVisible(rows > i)
            box.setRect(QRectF(0, i, cols, 1))
