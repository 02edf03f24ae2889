"""Writing traces and their pieces to disk, atomically.

Every writer goes through ``atomic_path``: the data goes to a temporary file in the target's own
directory, which is renamed over the target only once it is complete, so an existing file is
never left half-overwritten and a failed export leaves no half-file behind.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from explorer.core.display.labels import token_labels
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


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide and not thread-safe


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
    """The documented ``trace.npz`` layout (see README): whole-model arrays stacked over layers."""
    cfg, n = trace.config, trace.n_tokens
    L, H = cfg.n_layers, cfg.n_heads
    scores = np.empty((L, H, n, n), dtype=np.float32)
    pattern = np.empty((L, H, n, n), dtype=np.float32)
    for layer in range(L):
        for head in range(H):
            scores[layer, head] = trace.head(layer, head, "scores")
            pattern[layer, head] = trace.head(layer, head, "pattern")
    residual = np.stack([trace[f"blocks.{layer}.resid_pre"] for layer in range(L)] + [trace["resid_final"]])
    positions = trace["pos_embed"] if "pos_embed" in trace else np.zeros((n, cfg.d_model), np.float32)
    arrays = {
        "token_ids": trace.token_ids.astype(np.int64),
        "tokens": np.array(trace.tokens, dtype=str),
        "embeddings": trace["embed"],
        "positions": positions,
        "attention_scores": scores,
        "attention": pattern,
        "residual": residual,
        "residual_norms": np.linalg.norm(residual.astype(np.float64), axis=-1).astype(np.float32),
        "logits": trace["logits"],
    }
    if trace.interventions:  # the run was changed: say how (JSON text), so the file cannot pass for a clean run
        from explorer.core.interventions.spec import describe_all

        arrays["interventions"] = np.array(json.dumps(describe_all(trace.interventions)))
    if cfg.has_ffn:
        arrays["mlp_activations"] = np.stack([trace[f"blocks.{layer}.mlp.post"] for layer in range(L)])
    else:  # attention-only models have no neurons: an empty axis keeps the documented rank
        arrays["mlp_activations"] = np.zeros((L, n, 0), dtype=np.float32)
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in arrays.items()}


def write_trace_npz(trace: Trace, target: str | os.PathLike[str]) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **trace_arrays(trace))
    write_bytes(target, buf.getvalue())


def write_attention_files(trace: Trace, directory: str | os.PathLike[str], layers: Sequence[int] | None = None,
                          kind: str = "pattern") -> list[Path]:
    """One ``L{layer}_H{head}.npy`` and ``.csv`` (rows: query tokens, columns: key tokens) per head."""
    directory = Path(directory)
    labels = token_labels(trace.tokens)
    written = []
    for layer in (range(trace.config.n_layers) if layers is None else layers):
        for head in range(trace.config.n_heads):
            matrix = trace.head(layer, head, kind)
            stem = directory / f"L{layer}_H{head}"
            write_npy(stem.with_suffix(".npy"), matrix)
            write_matrix_csv(stem.with_suffix(".csv"), matrix, labels, labels, corner="query\\key")
            written += [stem.with_suffix(".npy"), stem.with_suffix(".csv")]
    return written
