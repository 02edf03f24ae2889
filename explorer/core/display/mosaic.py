"""Tile every head's attention pattern into one image: the all-heads overview (layers x heads).

One image with one pixel per (query, key) is far cheaper to draw than L x H separate plots, so
the overview is a single array: row-block l is layer l, column-block h is head h, and tiles are
separated by ``gap`` pixels of ``fill`` (NaN by default, which pyqtgraph draws transparent).

Downsampling: when a prompt is long, a tile of n x n pixels per head makes the overview huge
(GPT-2 small at n = 1024 would be 12 x 12 heads of a million pixels each). Each tile is then
reduced to at most ``max_tile`` pixels a side by block-averaging: with the integer factor
``f = ceil(n / max_tile)``, the pixel (i, j) of a tile is the mean of the pattern over queries
``i*f ... i*f+f-1`` and keys ``j*f ... j*f+f-1`` (the last block may be smaller). The mean of
attention weights over a block is still a weight in [0, 1], so a shared colour scale stays
meaningful. The overview is only a map: the detail view always shows a head's exact values.

Entries that are not finite (masked scores, -inf) are left out of averages; a pixel with no
finite entry becomes ``fill``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["MosaicGeometry", "downsample_factor", "block_average", "tile_heads"]

DEFAULT_MAX_TILE = 64

HeadSource = Callable[[int, int], np.ndarray]


def downsample_factor(n: int, max_tile: int | None) -> int:
    """Tokens per tile pixel (along each axis) so that a tile of n tokens fits in ``max_tile`` pixels."""
    if max_tile is None or n <= max_tile:
        return 1
    if max_tile < 1:
        raise ValueError(f"max_tile must be positive (got {max_tile})")
    return math.ceil(n / max_tile)


def block_average(matrix: np.ndarray, factor: int, fill: float = np.nan) -> np.ndarray:
    """Mean of each ``factor x factor`` block of ``matrix`` [n, m] -> [ceil(n/f), ceil(m/f)] (float32).

    Non-finite entries are ignored; an all-non-finite block becomes ``fill``.
    """
    a = np.asarray(matrix, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {a.shape}")
    finite = np.isfinite(a)
    if factor == 1:
        return np.where(finite, a, np.float32(fill)).astype(np.float32, copy=False)
    n, m = a.shape
    rows, cols = math.ceil(n / factor), math.ceil(m / factor)
    sizes_r = np.minimum(factor, n - np.arange(rows) * factor)  # tokens in each block (the last may be short)
    sizes_c = np.minimum(factor, m - np.arange(cols) * factor)
    all_finite = bool(finite.all())
    values = a if all_finite else np.where(finite, a, np.float32(0))
    if (n, m) != (rows * factor, cols * factor):
        padded = np.zeros((rows * factor, cols * factor), dtype=np.float32)
        padded[:n, :m] = values
        values = padded
    # rows of a block first (contiguous), then its columns: several times faster than one strided
    # float64 reduction over both; the float32 partial sums of at most factor values lose ~1e-7 relative
    sums = values.reshape(rows, factor, cols * factor).sum(axis=1).reshape(rows, cols, factor) \
        .sum(axis=2, dtype=np.float64)
    if all_finite:
        numbers = np.outer(sizes_r, sizes_c).astype(np.float64)
    else:
        numbers = np.add.reduceat(np.add.reduceat(finite.astype(np.float64), np.arange(0, n, factor), axis=0),
                                  np.arange(0, m, factor), axis=1)
    out = np.full((rows, cols), fill, dtype=np.float32)
    np.divide(sums, numbers, out=out, where=numbers > 0, casting="unsafe")
    return out


@dataclass(frozen=True)
class MosaicGeometry:
    """Where each head's tile lies in the mosaic image, and the way back from pixels to heads.

    Image coordinates are (x, y) = (column, row) in pixels, with pixel (r, c) covering
    ``[c, c+1) x [r, r+1)`` as pyqtgraph's ImageItem draws a row-major array.
    """

    n_layers: int
    n_heads: int
    n_tokens: int
    gap: int = 1
    factor: int = 1  # tokens per pixel along each axis (1 = exact, no downsampling)

    @property
    def tile(self) -> int:
        """Pixels along one side of a tile."""
        return math.ceil(self.n_tokens / self.factor)

    @property
    def pitch(self) -> int:
        """Distance in pixels from one tile's origin to the next one's."""
        return self.tile + self.gap

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns) of the mosaic image."""
        return self.n_layers * self.pitch - self.gap, self.n_heads * self.pitch - self.gap

    @property
    def downsampled(self) -> bool:
        return self.factor > 1

    def tile_origin(self, layer: int, head: int) -> tuple[int, int]:
        """(x, y) of the top-left pixel of the tile of (layer, head)."""
        return head * self.pitch, layer * self.pitch

    def tile_center(self, layer: int, head: int) -> tuple[float, float]:
        x, y = self.tile_origin(layer, head)
        return x + self.tile / 2, y + self.tile / 2

    def tokens_of_pixel(self, index: int) -> range:
        """The token positions that tile pixel ``index`` (along either axis) averages over."""
        return range(index * self.factor, min((index + 1) * self.factor, self.n_tokens))

    def head_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) of the tile under image point (x, y); None on a gap or outside."""
        cell = self.cell_at(x, y)
        return None if cell is None else (cell[0], cell[1])

    def cell_at(self, x: float, y: float) -> tuple[int, int, int, int] | None:
        """(layer, head, query, key) under image point (x, y); None on a gap or outside the image.

        When the mosaic is downsampled, query and key are the first token of the pixel's block
        (``tokens_of_pixel`` gives the whole block).
        """
        if not (math.isfinite(x) and math.isfinite(y)) or x < 0 or y < 0:
            return None
        col, row = int(math.floor(x)), int(math.floor(y))
        head, kx = divmod(col, self.pitch)
        layer, qy = divmod(row, self.pitch)
        if layer >= self.n_layers or head >= self.n_heads or kx >= self.tile or qy >= self.tile:
            return None
        return layer, head, qy * self.factor, kx * self.factor


def tile_heads(patterns: np.ndarray | HeadSource, gap: int = 1, fill: float = np.nan, *,
               max_tile: int | None = DEFAULT_MAX_TILE, n_layers: int | None = None,
               n_heads: int | None = None) -> tuple[np.ndarray, MosaicGeometry]:
    """Tile every head's [n, n] matrix into one float32 image (rows = layers, columns = heads).

    Parameters
    ----------
    patterns
        An array [L, H, n, n], or a callable ``(layer, head) -> [n, n]`` (then ``n_layers`` and
        ``n_heads`` are required); the callable lets a caller compute one head at a time.
    gap
        Pixels of ``fill`` between neighbouring tiles.
    fill
        Value of the gaps (NaN: drawn transparent by pyqtgraph).
    max_tile
        Largest tile side in pixels; longer prompts are block-averaged (see the module
        docstring). None keeps every tile exact.

    Returns
    -------
    image, geometry
        ``image`` has shape ``[L*(t+gap)-gap, H*(t+gap)-gap]`` where t = ``geometry.tile``
        (t = n unless downsampled).
    """
    if gap < 0:
        raise ValueError(f"gap must not be negative (got {gap})")
    if callable(patterns):
        if n_layers is None or n_heads is None:
            raise ValueError("a callable source needs n_layers and n_heads")
        source = patterns
        first = np.asarray(source(0, 0))
    else:
        stack = np.asarray(patterns)
        if stack.ndim != 4 or stack.shape[-1] != stack.shape[-2]:
            raise ValueError(f"expected patterns [L, H, n, n], got shape {stack.shape}")
        n_layers, n_heads = stack.shape[:2]
        source = lambda layer, head: stack[layer, head]  # noqa: E731
        first = stack[0, 0]
    if first.ndim != 2 or first.shape[0] != first.shape[1]:
        raise ValueError(f"each head's matrix must be square [n, n], got shape {first.shape}")
    n = first.shape[0]
    geometry = MosaicGeometry(int(n_layers), int(n_heads), int(n), int(gap), downsample_factor(n, max_tile))
    image = np.full(geometry.shape, fill, dtype=np.float32)
    t = geometry.tile
    for layer in range(geometry.n_layers):
        for head in range(geometry.n_heads):
            matrix = first if layer == head == 0 else np.asarray(source(layer, head))
            if matrix.shape != (n, n):
                raise ValueError(f"head ({layer}, {head}) has shape {matrix.shape}, expected {(n, n)}")
            x, y = geometry.tile_origin(layer, head)
            image[y:y + t, x:x + t] = block_average(matrix, geometry.factor, fill)
    return np.ascontiguousarray(image), geometry
