"""``transformer-explorer ov``: what a head moves at one query: each source position's share of its output and
of its direct effect on a target token, and what each source token would add to the logits if the head copied
it (explorer/core/analysis/ov.py)."""

from __future__ import annotations

import argparse

from explorer.commands.qk import add_head_arguments, head_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_head_arguments(parser)
    parser.add_argument("--target", default=None,
                        help="the token whose logit the direct effects are measured on (text of one token; default: "
                             "the model's top prediction at the query)")
    parser.add_argument("--distractor", default=None, help="measure the target's logit minus this token's")
    parser.add_argument("--top", type=int, default=5, help="sources listed, and tokens per source (default 5)")
    parser.add_argument("--copy", choices=["embedding", "value"], default="embedding",
                        help="copy each source token's embedding through W_V and W_O (the OV circuit), or the "
                             "whole value the head reads at each position (default: embedding)")


def run(args: argparse.Namespace) -> int:
    from explorer.commands.patch import token_id
    from explorer.core.analysis.ov import ov_circuit, ov_split
    from explorer.core.display.tokens import quoted, vocab_quoted

    loaded, trace, query = head_trace(args)
    tok = loaded.tokenizer
    target = token_id(tok, args.target, "target") if args.target is not None else None
    distractor = token_id(tok, args.distractor, "distractor") if args.distractor is not None else None
    split = ov_split(trace, args.layer, args.head, query, target, distractor)
    tokens = trace.tokens
    aim = vocab_quoted(tok, split.target) + (f" − {vocab_quoted(tok, distractor)}" if distractor is not None else "")
    print(f"head {split.layer}.{split.head} at query #{query} {quoted(tokens[query])}: its output by source "
          f"(weight, share of the output" + (f", direct effect on {aim})" if split.dla is not None else ")"))
    for a in sorted(range(len(split.sources)), key=lambda a: -abs(split.shares[a]))[: args.top]:
        j = int(split.sources[a])
        effect = f"  {split.dla[a]:+.4f}" if split.dla is not None else ""
        print(f"  #{j} {quoted(tokens[j])}  {split.weights[a]:.3f}  {split.shares[a]:>5.0%}{effect}")
    if split.dla is not None:
        print(f"  the direct effects add up to {split.dla.sum():+.4f}; the head's DLA term: {split.dla_total:+.4f}")
    else:
        print(f"note: no direct effects: {split.dla_note}")
    circuit = ov_circuit(trace, split.layer, split.head, query, top=args.top, copy=args.copy, limit=args.top)
    what = "token" if args.copy == "embedding" else "position's value"
    print(f"if the head copied each source {what} with weight 1, the logits it would raise most:")
    for a in range(min(args.top, len(circuit.sources))):
        pushed = ", ".join(f"{vocab_quoted(tok, int(i))} {v:+.2f}"
                           for i, v in zip(circuit.top_ids[a], circuit.top_values[a]))
        print(f"  {vocab_quoted(tok, int(circuit.token_ids[a]))} (#{int(circuit.sources[a])}, weight "
              f"{circuit.weights[a]:.3f}): {pushed}")
    for note in circuit.notes:
        print(f"note: {note}")
    return 0
