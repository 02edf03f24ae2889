"""``transformer-explorer compare``: two models on the same prompt, written to ``--out/compare.npz``.

``compare.npz`` holds ``resid_cos`` [L + 1, n] (cosine of the two residual streams entering each block
and after the last), ``resid_rel`` [L + 1, n] (|a - b| / |a|), ``head_js`` [L, H] (each head's
Jensen-Shannon divergence of the two patterns, natural log, averaged over query positions),
``logit_kl`` [n] (KL(A || B) of the next-token distributions), ``layer_map`` (B's boundary for each of
A's), ``token_ids``, ``first_diverge`` (first boundary, block and position that differ; -1: none) and
``nonfinite`` [2, 3] (A, B x residual stream, attention patterns, logits: where a model produced NaN or
infinity; those parts are not compared, and a warning names the model).
See explorer/core/analysis/compare.py. Both models must read the prompt as the same token ids.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from explorer.commands import add_model_arguments, load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--other", required=True,
                        help="the second checkpoint (B): a directory, a file in one, or a built-in model name")
    parser.add_argument("--prompt", "-p", required=True, help="the text both models read")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the directory compare.npz is written into")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from explorer.core.analysis.compare import compare_models
    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.export import write_bytes

    a = load_model(args)
    b = load_checkpoint(args.other, device=args.device, dtype=args.dtype)
    result = compare_models(a, b, args.prompt)
    buffer = io.BytesIO()
    np.savez(buffer, **result.arrays())
    target = Path(args.out) / "compare.npz"
    write_bytes(target, buffer.getvalue())
    print(f"{a.name} against {b.name} on {len(result.token_ids)} tokens")
    for note in result.notes:
        print(f"note: {note}")
    names = (f"model A ({a.name})", f"model B ({b.name})")
    broken = result.nonfinite_line(names)
    if broken:  # on stderr too: a script reading the exit status alone should not miss it
        print(f"warning: {broken}", file=sys.stderr)

    def largest(values: np.ndarray, part: str) -> str:
        return "not defined" if result.broken(part) else f"{float(values.max(initial=0.0)):.3g}"

    cos = np.isfinite(result.resid_cos)
    lowest = f"{float(result.resid_cos[cos].min()):.6f}" if cos.any() and not result.broken("residual stream") \
        else "not defined"
    print(f"lowest residual cosine {lowest}, largest head JS {largest(result.head_js, 'attention patterns')}, "
          f"largest KL {largest(result.logit_kl, 'logits')}")
    print(result.summary(names))
    print(f"wrote {target}")
    return 0
