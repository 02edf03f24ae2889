"""``transformer-explorer qk``: why a head attends from one token to another, as the ranked terms of the exact
split of its score (explorer/core/analysis/qk.py); ``--table`` writes the whole query part x key part table."""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.commands import add_model_arguments, load_model


def add_head_arguments(parser: argparse.ArgumentParser) -> None:
    """The prompt and the head, shared with ``ov``."""
    add_model_arguments(parser)
    parser.add_argument("--prompt", "-p", required=True, help="the text to run")
    parser.add_argument("--layer", "-l", type=int, required=True, help="the head's block")
    parser.add_argument("--head", type=int, required=True, help="the head in that block")
    parser.add_argument("--query", "-q", type=int, default=-1, help="the query position (default: the last token)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_head_arguments(parser)
    parser.add_argument("--key", "-k", type=int, default=None,
                        help="the key position (default: the one the head attends to most)")
    parser.add_argument("--top", type=int, default=10, help="how many terms to print (default 10)")
    parser.add_argument("--by", choices=["head", "layer"], default="head",
                        help="one part per earlier head, or per block's attention (default: head)")
    parser.add_argument("--table", type=Path, default=None, metavar="FILE.csv",
                        help="also write the whole table (query parts as rows, key parts as columns)")


def head_trace(args: argparse.Namespace):
    """(loaded model, trace, query position) for the prompt."""
    from explorer.core.errors import PromptError

    loaded = load_model(args)
    trace = loaded.trace(args.prompt)
    n = trace.n_tokens
    if not -n <= args.query < n:
        raise PromptError(f"query position {args.query} is outside the prompt's {n} tokens")
    return loaded, trace, args.query % n


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from explorer.core.analysis.qk import qk_split
    from explorer.core.analysis.stream_parts import attention_layer
    from explorer.core.display.tokens import quoted

    loaded, trace, query = head_trace(args)
    key = args.key
    layers = trace.config.n_layers
    if -layers <= args.layer < layers:  # a recurrent layer: one line, before looking for its (absent) pattern
        attention_layer(trace.config, args.layer % layers, "attention scores to split")
    if key is None:
        key = int(np.argmax(trace.head(args.layer % trace.config.n_layers, args.head, "pattern")[query]))
    split = qk_split(trace, args.layer, args.head, query, key, by=args.by)
    tokens = trace.tokens
    capped = f", {split.capped:+.4f} after the cap" if split.capped is not None else ""
    print(f"head {split.layer}.{split.head}, query #{query} {quoted(tokens[query])} -> key #{split.key} "
          f"{quoted(tokens[split.key])}: score {split.score:+.4f}{capped}; the terms add up to {split.total:+.4f}")
    for term in split.terms(args.top):
        print(f"  {term.share:>5.0%}  {term.value:+9.4f}  {term.label}")
    for note in split.notes:
        print(f"note: {note}")
    if args.table is not None:
        from explorer.core.export import write_matrix_csv

        write_matrix_csv(args.table, split.table, split.query_names, split.key_names, corner="query part\\key part")
        print(f"wrote {args.table}")
    return 0
