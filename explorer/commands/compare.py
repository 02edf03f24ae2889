"""``transformer-explorer compare``: two models on the same prompt, written to ``--out/compare.npz``.

``compare.npz`` holds ``resid_cos`` [L + 1, n] (cosine of the two residual streams entering each block
and after the last), ``resid_rel`` [L + 1, n] (|a - b| / |a|), ``head_js`` [L, H] (each head's
Jensen-Shannon divergence of the two patterns, natural log, averaged over query positions),
``logit_kl`` [n] (KL(A || B) of the next-token distributions), ``layer_map`` (B's boundary for each of
A's), ``token_ids`` and ``first_diverge`` (first boundary, block and position that differ; -1: none).
See explorer/core/analysis/compare.py. Both models must read the prompt as the same token ids.
"""

from __future__ import annotations

import argparse
import io
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
    cos = np.isfinite(result.resid_cos)
    lowest = f"{float(result.resid_cos[cos].min()):.6f}" if cos.any() else "not defined"
    print(f"lowest residual cosine {lowest}, largest head JS {float(result.head_js.max(initial=0.0)):.3g}, "
          f"largest KL {float(result.logit_kl.max(initial=0.0)):.3g}")
    print(result.summary())
    print(f"wrote {target}")
    return 0
