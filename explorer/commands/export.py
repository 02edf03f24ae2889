from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.commands import add_model_arguments, load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--prompt", "-p", required=True, help="the text to run through the model")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the directory to write into")
    parser.add_argument("--plots", action="store_true",
                        help="also render every panel offscreen: one PNG per panel and per head")


def run(args: argparse.Namespace) -> int:
    from explorer.core.export import write_attention_files, write_trace_npz

    loaded = load_model(args)
    trace = loaded.trace(args.prompt)
    if trace.meta.truncated_from:
        print(f"note: the prompt has {trace.meta.truncated_from} tokens; only the first "
              f"{trace.n_tokens} fit the context", file=sys.stderr)
    from explorer.core.analysis.numerics import first_nonfinite

    bad = first_nonfinite(trace)
    if bad is not None:  # exported as computed, but never silently
        print(f"warning: the model's numbers are not finite: {bad.describe()}", file=sys.stderr)
    write_trace_npz(trace, args.out / "trace.npz")
    files = write_attention_files(trace, args.out / "attention")
    print(f"wrote {args.out / 'trace.npz'} and {len(files)} attention files for {trace.n_tokens} tokens")
    if args.plots:
        from explorer.ui.export.offscreen import render_plots

        pngs = render_plots(loaded, trace, args.out / "plots")
        print(f"wrote {len(pngs)} plot images to {args.out / 'plots'}")
    return 0
