"""``transformer-explorer corpus``: run a model over a corpus and keep every unit's evidence in a database.

    transformer-explorer corpus --checkpoint gpt2 --corpus texts/ --out run.db [--sae DIR] [--tokens N]
    transformer-explorer corpus merge a.db b.db --out c.db     (runs over different parts: --skip)
    transformer-explorer corpus info run.db

The same command with the same ``--out`` resumes a stopped or crashed run. Ctrl-C stops after the
block under way; every finished batch is kept.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from explorer.commands import add_model_arguments, load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="*", metavar="merge A.db B.db | info RUN.db",
                        help="merge runs into --out, or describe a run (without these: run the model)")
    add_model_arguments(parser)
    parser.add_argument("--corpus", default=None,
                        help="a text file, a folder of .txt/.md/.jsonl/.parquet files, a JSON Lines or Parquet file, "
                             "or 'sample' (the bundled sample, about 4 MB of varied text)")
    parser.add_argument("--out", "-o", type=Path, default=None,
                        help="the database to write (a folder: a file named after the model, corpus and SAE in it); "
                             "an earlier run of the same settings is resumed")
    parser.add_argument("--sae", type=Path, default=None, metavar="SAE_DIR",
                        help="also keep every feature of this SAE (SAELens directory)")
    parser.add_argument("--allow-other-model", action="store_true", help="use an SAE trained on another model")
    parser.add_argument("--tokens", type=int, default=None, help="read this many tokens (default: the whole corpus)")
    parser.add_argument("--skip", type=int, default=0,
                        help="leave out the first SKIP tokens (whole windows): the second part of a run to merge")
    parser.add_argument("--window", type=int, default=None, help="tokens per window (default: 256 or the context)")
    parser.add_argument("--batch", type=int, default=None, help="windows per batch (default: about 16k tokens on a "
                                                                 "GPU, 4k on the CPU)")
    parser.add_argument("--top", type=int, default=20, help="top examples kept per unit (20)")
    parser.add_argument("--units", default=None, metavar="KINDS",
                        help="which units to keep: neurons,features,experts (default: all the model has)")
    parser.add_argument("--no-heads", action="store_true", help="keep no head statistics (faster: no patterns)")
    parser.add_argument("--text-field", default="text", help="the text field of JSON Lines and Parquet rows (text)")


def run(args: argparse.Namespace) -> int:
    from explorer.core.corpus.reading import CorpusError

    action = list(args.action)
    if action and action[0] == "merge":
        return _merge(action[1:], args.out)
    if action and action[0] == "info":
        if len(action) != 2:
            raise CorpusError("corpus info takes one run: transformer-explorer corpus info run.db")
        return _info(action[1])
    if action:
        raise CorpusError(f"unknown corpus action {action[0]!r}: merge or info (or none, to run)")
    if args.corpus is None or args.out is None:
        raise CorpusError("a corpus run needs --corpus (a file, a folder or 'sample') and --out (the database)")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from explorer.core.cancel import Cancel
    from explorer.core.corpus.reading import Corpus
    from explorer.core.corpus.read import summary_lines
    from explorer.core.corpus.run import run_corpus

    corpus = Corpus(args.corpus, args.text_field)  # a missing corpus fails before the model loads
    if corpus.skipped:
        print(f"note: {corpus.skipped} files of other kinds in {args.corpus} are left out", file=sys.stderr)
    loaded = load_model(args)
    sae = _open_sae(args, loaded) if args.sae else None
    units = set(args.units.split(",")) if args.units else None
    cancel = Cancel()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    show = _Shower()
    try:
        summary = run_corpus(loaded, corpus, args.out, sae, args.tokens, args.skip, args.window, args.batch,
                             args.top, not args.no_heads, units, show, cancel)
    finally:
        signal.signal(signal.SIGINT, previous)
        show.end()
    if summary.cancelled:
        print(f"stopped: {summary.tokens:,} tokens are kept in {summary.path}; the same command resumes")
        return 130
    for line in summary_lines(summary.path):
        print(line)
    print(f"wrote {summary.path}")
    return 0


class _Shower:
    """Progress on the terminal: one line rewritten in place, or a line every few seconds when not a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.last = 0.0
        self.shown = False

    def __call__(self, progress) -> None:
        now = time.monotonic()
        if self.tty:
            print(f"\r{progress.line():<78}", end="", flush=True)
            self.shown = True
        elif now - self.last >= 2.0:
            print(progress.line(), flush=True)
            self.last = now

    def end(self) -> None:
        if self.shown:
            print()


def _open_sae(args: argparse.Namespace, loaded):
    from explorer.core.features.sae import SAEModelMismatch, open_sae

    try:
        sae = open_sae(args.sae, loaded.config, loaded.name, args.allow_other_model)
    except SAEModelMismatch as exc:
        raise SAEModelMismatch(str(exc).replace("open it anyway", "--allow-other-model opens it anyway")) from None
    for warning in sae.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return sae


def _merge(inputs: list[str], out: Path | None) -> int:
    from explorer.core.corpus.merge import merge_runs
    from explorer.core.corpus.reading import CorpusError
    from explorer.core.corpus.read import summary_lines

    if out is None:
        raise CorpusError("corpus merge needs --out: the new database")
    path = merge_runs(inputs, out)
    for line in summary_lines(path):
        print(line)
    print(f"wrote {path}")
    return 0


def _info(path: str) -> int:
    from explorer.core.corpus.read import summary_lines

    for line in summary_lines(path):
        print(line)
    return 0
