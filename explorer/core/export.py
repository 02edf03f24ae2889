"""Writing traces and their pieces to disk, atomically.

Every writer goes through ``atomic_path``: the data goes to a temporary file in the target's own
directory, which is renamed over the target only once it is complete, so an existing file is
never left half-overwritten and a failed export leaves no half-file behind. A multi-file export
goes through ``export_directory`` (``export_folder``): written into a staging folder, then swapped in
file by file under a journal; the export owns only the files its manifest lists.

``trace.npz`` is streamed (``write_trace_npz``): each array goes into the archive a block at a
time (a head's scores or pattern, a layer's stream or neurons), so a 1024-token trace of GPT-2
small (1.2 GB of patterns and scores) never sits in memory as a whole.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from explorer.core.display.labels import token_labels
from explorer.core.export_folder import _UMASK, export_directory  # noqa: F401  (export_directory re-exported)
from explorer.core.trace import Trace


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target`` in one rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        tmp_path.chmod(0o666 & ~_UMASK)  # mkstemp makes 0600; an export gets ordinary permissions
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()




def write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_text(target: str | os.PathLike[str], text: str) -> None:
    write_bytes(target, text.encode("utf-8"))


def write_npy(target: str | os.PathLike[str], array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    write_bytes(target, buf.getvalue())


def matrix_csv(matrix: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], corner: str = "") -> str:
    """A labelled 2-D table as CSV text (-inf and nan written as such)."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix of shape {matrix.shape} does not match {len(row_labels)} x {len(col_labels)} labels")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([corner, *col_labels])
    for label, row in zip(row_labels, matrix):
        writer.writerow([label, *(repr(float(v)) if np.isfinite(v) else str(float(v)) for v in row)])
    return out.getvalue()


def write_matrix_csv(target: str | os.PathLike[str], matrix: np.ndarray, row_labels: Sequence[str],
                     col_labels: Sequence[str], corner: str = "") -> None:
    write_text(target, matrix_csv(matrix, row_labels, col_labels, corner))


def trace_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """The documented ``trace.npz`` layout (see README) as arrays in memory: whole-model arrays
    stacked over layers. ``write_trace_npz`` streams the same arrays without building them."""
    return {name: _materialise(part) for name, part in trace_parts(trace)}


def _materialise(part: ArrayPart) -> np.ndarray:
    if part.array is not None:
        return part.array
    out = np.empty(part.shape, dtype=part.dtype)
    flat = out.reshape((-1, *part.shape[part.split:]))
    for i, block in enumerate(part.blocks()):
        flat[i] = block
    return out


class ArrayPart:
    """One array of the export: given whole (``array``), or as ``blocks()``, the sub-arrays along
    its first ``split`` axes in C order, produced one at a time (a head's pattern, a layer's neurons)."""

    def __init__(self, array: np.ndarray | None = None, shape: tuple[int, ...] = (), dtype=np.float32,
                 blocks: Callable[[], Iterator[np.ndarray]] | None = None, split: int = 0) -> None:
        self.array = array
        self.shape = tuple(array.shape) if array is not None else tuple(shape)
        self.dtype = np.dtype(array.dtype if array is not None else dtype)
        self.blocks = blocks
        self.split = split

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def trace_parts(trace: Trace) -> Iterator[tuple[str, ArrayPart]]:
    """The arrays of ``trace.npz`` in order, the large ones as blocks computed one at a time."""
    cfg, n = trace.config, trace.n_tokens
    L, H = cfg.n_layers, cfg.n_heads

    def heads(kind: str) -> Iterator[np.ndarray]:
        for layer in range(L):
            for head in range(H):
                yield _f32(trace.head(layer, head, kind))

    def residual() -> Iterator[np.ndarray]:
        for layer in range(L):
            yield _f32(trace[f"blocks.{layer}.resid_pre"])
        yield _f32(trace["resid_final"])

    def norms() -> np.ndarray:
        return np.stack([np.linalg.norm(block.astype(np.float64), axis=-1).astype(np.float32)
                         for block in residual()])

    yield "token_ids", ArrayPart(trace.token_ids.astype(np.int64))
    yield "tokens", ArrayPart(np.array(trace.tokens, dtype=str))
    yield "embeddings", ArrayPart(_f32(trace["embed"]))
    positions = trace["pos_embed"] if "pos_embed" in trace else np.zeros((n, cfg.d_model), np.float32)
    yield "positions", ArrayPart(_f32(positions))
    yield "attention_scores", ArrayPart(shape=(L, H, n, n), blocks=lambda: heads("scores"), split=2)
    yield "attention", ArrayPart(shape=(L, H, n, n), blocks=lambda: heads("pattern"), split=2)
    yield "residual", ArrayPart(shape=(L + 1, n, cfg.d_model), blocks=residual, split=1)
    yield "residual_norms", ArrayPart(norms())
    yield "logits", ArrayPart(_f32(trace["logits"]))
    if trace.meta.chat is not None:  # a templated conversation: each token's turn, role and kind (JSON text)
        yield "chat", ArrayPart(np.array(trace.meta.chat.to_json()))
    if trace.interventions:  # the run was changed: say how (JSON text), so the file cannot pass for a clean run
        from explorer.core.interventions.spec import describe_all

        yield "interventions", ArrayPart(np.array(json.dumps(describe_all(trace.interventions))))
    if cfg.has_ffn:  # a mixture-of-experts layer has no d_ff neurons of its own: NaN rows (its routing below)
        yield "mlp_activations", ArrayPart(shape=(L, n, cfg.d_ff), split=1, blocks=lambda: (
            np.full((n, cfg.d_ff), np.nan, np.float32) if cfg.layer(layer).is_moe
            else _f32(trace[f"blocks.{layer}.mlp.post"]) for layer in range(L)))
    else:  # attention-only models have no neurons: an empty axis keeps the documented rank
        yield "mlp_activations", ArrayPart(np.zeros((L, n, 0), dtype=np.float32))
    if cfg.moe_layers:  # each MoE layer's routing: which experts each token went to, with what weight
        moe = list(cfg.moe_layers)
        yield "moe_layers", ArrayPart(np.array(moe, dtype=np.int64))
        yield "moe_experts", ArrayPart(np.stack([trace[f"blocks.{la}.moe.experts"] for la in moe]).astype(np.int64))
        yield "moe_weights", ArrayPart(np.stack([_f32(trace[f"blocks.{la}.moe.weights"]) for la in moe]))
        yield "moe_router_logits", ArrayPart(np.stack([_f32(trace[f"blocks.{la}.moe.router_logits"]) for la in moe]))


Progress = Callable[[str], None]


def write_trace_npz(trace: Trace, target: str | os.PathLike[str], progress: Progress | None = None,
                    compress: bool = False, provenance: dict | None = None) -> None:
    """Write ``trace.npz`` (the README's layout) atomically, streaming each array into the archive
    a block at a time, so memory holds one head's pattern, not all of them. ``np.load`` reads it
    as if ``np.savez`` had written it. ``compress``: deflate each member (smaller, much slower).
    ``provenance`` (``core/provenance.record``): a ``provenance`` member, its JSON text."""
    import zipfile

    say = progress or (lambda text: None)
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    parts = list(trace_parts(trace))
    if provenance is not None:
        parts.append(("provenance", ArrayPart(np.array(json.dumps(provenance, ensure_ascii=False, default=str)))))
    with atomic_path(target) as tmp, zipfile.ZipFile(tmp, "w", compression=mode, allowZip64=True) as archive:
        for name, part in parts:
            say(f"{Path(target).name}: {name} {'x'.join(map(str, part.shape))} ({part.nbytes / 2**20:.0f} MB)")
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                _write_npy(member, part)


def _write_npy(stream, part: ArrayPart) -> None:
    if part.array is not None:
        np.lib.format.write_array(stream, np.asarray(part.array), allow_pickle=False)
        return
    header = {"descr": np.lib.format.dtype_to_descr(part.dtype), "fortran_order": False, "shape": part.shape}
    np.lib.format.write_array_header_2_0(stream, header)
    expected = part.shape[part.split:]
    for block in part.blocks():
        if block.shape != expected:
            raise ValueError(f"block of shape {block.shape} where {expected} was expected")
        stream.write(np.ascontiguousarray(block, dtype=part.dtype).tobytes())


# --- a directory of files: explorer.core.export_folder.export_directory (an export owns only what it wrote)

def write_attention_files(trace: Trace, directory: str | os.PathLike[str], layers: Sequence[int] | None = None,
                          kind: str = "pattern", csv: bool = True, progress: Progress | None = None) -> list[Path]:
    """One ``L{layer}_H{head}.npy`` and, with ``csv``, ``.csv`` (rows: query tokens, columns: key
    tokens) per head. The CSVs are large (13.5 MB per head at 1024 tokens) and slow to write."""
    directory = Path(directory)
    labels = token_labels(trace.tokens)
    written = []
    layers = list(range(trace.config.n_layers) if layers is None else layers)
    for i, layer in enumerate(layers):
        if progress is not None:
            progress(f"attention files: layer {layer} ({i + 1} of {len(layers)})")
        for head in range(trace.config.n_heads):
            matrix = trace.head(layer, head, kind)
            stem = directory / f"L{layer}_H{head}"
            write_npy(stem.with_suffix(".npy"), matrix)
            written.append(stem.with_suffix(".npy"))
            if csv:
                write_matrix_csv(stem.with_suffix(".csv"), matrix, labels, labels, corner="query\\key")
                written.append(stem.with_suffix(".csv"))
    return written
