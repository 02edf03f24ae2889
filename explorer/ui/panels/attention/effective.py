"""The Attention panel on a layer without attention: a recurrent or convolutional layer's effective attention.

A Gated DeltaNet, Mamba-2 or short-convolution layer has no pattern, but its output is, per head (a convolution:
per channel), a weighted sum over earlier tokens (core/mixers/effective.py). The panel shows those weights where an
attention layer shows its pattern, through ``core/analysis/effective_tiles`` (one call per layer, tile by tile for
long prompts):

* the detail: the head's exact weights, a diverging colour map (they can be negative; 0 is white), later keys
  hatched, the title naming the kind of layer; a long prompt's head pooled to the weight of largest size in
  each block (its sign kept) with exact tiles where the user zooms in, as an attention head's;
* the query row as bars, red above 0 and blue below;
* the all-heads grid and the head statistics of a model whose layers differ (``core/analysis/layer_maps.py``):
  a recurrent map's tile is each row's shares of its weights' sizes, so it shares the patterns' colour scale.

A map is computed off the GUI thread (``Panel.later``) unless the prompt is short (``CHEAP_TOKENS``): a DeltaNet
head at 1024 tokens is tens of milliseconds.
"""

from __future__ import annotations

import numpy as np

from explorer.core.analysis import effective_tiles, layer_maps
from explorer.core.analysis.layer_maps import attention_head, grid_columns, grid_maps, max_maps, maps_of, uniform
from explorer.core.mixers.effective import effective_kind
from explorer.core.trace import Trace

EFFECTIVE = ("effective weight", "CET-D1", True)  # (value name, colour map, symmetric levels), as views.KINDS
CHEAP_TOKENS = 96  # up to this many tokens a recurrent head's map is computed on the GUI thread at once
CLIP_PERCENTILE = 99.5  # the colour scale's reach: this percentile of the weights' sizes (hover reads the rest)

__all__ = [  # and layer_maps' grid rules, for the panel's modules
    "CHEAP_TOKENS", "EFFECTIVE", "detail_title", "future_keys", "head_map", "kind_of", "layer_heads", "layers_differ",
    "levels_of", "map_word", "maps_fit", "row_title", "short_kind", "stacked_maps",
    "attention_head", "grid_columns", "grid_maps", "max_maps", "maps_of", "uniform"]


def kind_of(trace: Trace, layer: int) -> str | None:
    """The kind of layer whose effective attention ``layer`` shows ("Gated DeltaNet", "Mamba-2", "short
    convolution"); None for an attention layer (or a block without a token mixer)."""
    return effective_kind(trace.config, layer)


def map_word(trace: Trace, layer: int) -> str:
    """What one map of the layer is called: a convolution's are its channels."""
    return "channel" if trace.config.layer(layer).mixer == "short_conv" else "head"


def layer_heads(trace: Trace, layer: int) -> int:
    """How many maps ``layer`` has (at least 1: a block without a token mixer is clamped to its none)."""
    return max(1, maps_of(trace.config, layer))


def detail_title(trace: Trace, layer: int, head: int, what: str = "") -> str:
    """The detail's title: on a recurrent layer "L0 H3: Gated DeltaNet" over "effective attention (can be
    negative)" (its weights; a line that fits the detail's width at 1280 x 800); on an attention layer
    "L3 H1: ``what``", over the kind of attention where a model's layers differ ("sliding attention (window
    512)"): two lines wherever a layer of the model needs them, so a layer switch
    keeps the plot's height (and the kind of layer is never the part a narrow plot elides)."""
    word = "H" if map_word(trace, layer) == "head" else "channel "
    kind = kind_of(trace, layer)
    if kind is not None:
        return f"L{layer} {word}{head}: {kind}<br>effective attention (can be negative)"
    first = f"L{layer} {word}{head}: {what}"
    if not layers_differ(trace.config):
        return first
    return f"{first}<br>{effective_tiles.layer_title(trace.config, layer).split(': ', 1)[-1]}"


def layers_differ(cfg) -> bool:
    """Whether the model's layers are not all the same kind of attention (a hybrid, sliding beside global)."""
    kinds = {effective_tiles.layer_title(cfg, layer).split(": ", 1)[-1] for layer in range(cfg.n_layers)}
    return not uniform(cfg) or len(kinds) > 1


def row_title(trace: Trace, layer: int) -> str:
    """The query row's quantity on a recurrent layer."""
    return f"{kind_of(trace, layer)} effective weight"


def short_kind(trace: Trace, layer: int) -> str:
    """A layer's kind in a word, for the grid's row labels ("attn", "DeltaNet", "Mamba-2", "conv", "FFN")."""
    return layer_maps.short_kind(trace.config, layer)


def head_map(trace: Trace, layer: int, head: int) -> np.ndarray:
    """One recurrent head's exact [n, n] effective attention (0 where a key comes after the query)."""
    n = trace.n_tokens
    return effective_tiles.weights_block(trace, layer, head, (0, n), (0, n))


def future_keys(n: int, causal: bool = True) -> np.ndarray:
    """[n, n] bool: the keys after each query (hatched: a recurrent layer never reads them)."""
    return np.triu(np.ones((n, n), dtype=bool), 1) if causal else np.zeros((n, n), dtype=bool)


def levels_of(values: np.ndarray, seen: np.ndarray | None = None) -> tuple[float, float]:
    """Symmetric colour levels for signed weights: +- the ``CLIP_PERCENTILE`` of their sizes (where ``seen``), so
    one large weight (a Mamba-2 skip on the diagonal, the first token's) leaves the others readable."""
    size = np.abs(values[seen] if seen is not None else values)
    size = size[np.isfinite(size)]
    top = float(np.percentile(size, CLIP_PERCENTILE)) if size.size else 1.0
    top = top if top > 0 else (float(size.max()) if size.size and size.max() > 0 else 1.0)
    return -top, top


def maps_fit(trace: Trace) -> bool:
    """Whether every map on the grid, whole, fits ``views.LAYER_PATTERN_BUDGET`` (an export of them all)."""
    from explorer.ui.panels.attention.views import LAYER_PATTERN_BUDGET

    cfg, n = trace.config, trace.n_tokens
    return sum(grid_maps(cfg, layer) for layer in range(cfg.n_layers)) * n * n * 4 <= LAYER_PATTERN_BUDGET


def stacked_maps(trace: Trace) -> tuple[np.ndarray, list[str], list[str]]:
    """Every map on the grid, exact, stacked for an export: [maps * n, n], rows "L{l} H{h} {i}:{token}" (a recurrent
    layer's named: "L0 H1 Gated DeltaNet effective 3:'x'"), columns the keys."""
    from explorer.core.display.labels import token_labels

    cfg, n = trace.config, trace.n_tokens
    labels = token_labels(trace.tokens)
    parts, rows = [], []
    for layer in range(cfg.n_layers):
        kind = kind_of(trace, layer)
        for head in range(grid_maps(cfg, layer)):
            parts.append(effective_tiles.weights_block(trace, layer, head, (0, n), (0, n)))
            name = f"L{layer} H{head}" + (f" {kind} effective" if kind is not None else "")
            rows += [f"{name} {label}" for label in labels]
    stack = np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros((0, n), np.float32)
    return stack, rows, labels
