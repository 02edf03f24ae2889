"""One attention map per head (PNG, NPY, CSV), written by a generator that yields its progress and
stops when asked: File > Export attention maps… runs it in a worker thread with a progress dialog and
a Cancel button; ``transformer-explorer export --plots`` runs it to the end.

The PNGs are drawn by ``raster.heatmap_image`` (QPainter on a QImage, allowed off the GUI thread), so
no widget is created and no window appears.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg

from explorer.core.analysis import effective_tiles
from explorer.core.analysis.layer_maps import grid_maps, uniform
from explorer.core.cancel import Cancel
from explorer.core.mixers.effective import effective_kind
from explorer.core.display.labels import token_labels
from explorer.core.export import write_matrix_csv, write_npy
from explorer.core.trace import Trace
from explorer.ui.export.raster import heatmap_image, save_png

LUT_POINTS = 256


@dataclass(frozen=True)
class Progress:
    done: int  # heads written so far
    total: int
    layer: int
    head: int
    files: tuple[Path, ...]  # the files of this head


def viridis_lut() -> np.ndarray:
    return pg.colormap.get("viridis").getLookupTable(0.0, 1.0, LUT_POINTS, alpha=False)


def maps_in(cfg, layer: int) -> int:
    """How many maps an export writes for ``layer``: its heads (a hybrid: those of its all-heads grid)."""
    return cfg.n_heads if uniform(cfg) else grid_maps(cfg, layer)


def map_count(trace: Trace) -> int:
    """How many maps an export of every layer writes."""
    return sum(maps_in(trace.config, layer) for layer in range(trace.config.n_layers))


def diverging_lut() -> np.ndarray:
    return pg.colormap.get("CET-D1").getLookupTable(0.0, 1.0, LUT_POINTS, alpha=False)


def write_attention_maps(trace: Trace, directory: str | os.PathLike[str], layers: Sequence[int] | None = None,
                         cancel: Cancel | None = None, png: bool = True) -> Iterator[Progress]:
    """Write ``L{l}_H{h}.png`` (unless ``png`` is False), ``.npy`` and ``.csv`` per head into
    ``directory``; yield a ``Progress`` after each head; stop before the next head once ``cancel`` is set.
    A model whose layers differ: each map of its all-heads grid (``layer_maps.grid_maps``: a recurrent layer's
    effective attention per head, signed, in a diverging map; none for a block without a token mixer)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg, n = trace.config, trace.n_tokens
    layers = list(range(cfg.n_layers) if layers is None else layers)
    counts = {layer: maps_in(cfg, layer) for layer in layers}
    total = sum(counts.values())
    labels = token_labels(trace.tokens)
    masked = np.triu(np.ones((n, n), dtype=bool), 1) if cfg.causal else None
    lut = viridis_lut()
    done = 0
    for layer in layers:
        kind = effective_kind(cfg, layer)  # a recurrent layer: its effective attention, signed
        for head in range(counts[layer]):
            if cancel is not None and cancel.is_set():
                return
            if kind is None:
                pattern, levels, what = trace.head(layer, head, "pattern"), (0.0, 1.0), "attention pattern"
            else:
                pattern = effective_tiles.weights_block(trace, layer, head, (0, n), (0, n))
                top = max(1e-12, float(np.abs(pattern).max(initial=0.0)))
                levels, what = (-top, top), f"{kind} effective attention (weights can be negative)"
            stem = directory / f"L{layer}_H{head}"
            write_npy(stem.with_suffix(".npy"), pattern)
            write_matrix_csv(stem.with_suffix(".csv"), pattern, labels, labels, corner="query\\key")
            files = [stem.with_suffix(".npy"), stem.with_suffix(".csv")]
            if png:
                image = heatmap_image(pattern, lut if kind is None else diverging_lut(), levels, labels, labels,
                                      hidden=masked, title=f"layer {layer}, head {head}: {what}",
                                      row_name="query", col_name="key")
                save_png(image, stem.with_suffix(".png"))
                files.insert(0, stem.with_suffix(".png"))
            done += 1
            yield Progress(done, total, layer, head, tuple(files))
