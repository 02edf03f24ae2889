"""``transformer-explorer patch``: activation patching and direct logit attribution, written to files.

Writes into ``--out``:

* ``resid_patch.npy`` [L + 1, n] and ``head_patch.npy`` [L, H]: the share of the clean-vs-corrupted
  difference of the target's logit (minus the distractor's) that patching one activation from the
  clean run into the corrupted one restores (explorer/core/interventions/patching.py);
* ``dla_heads.npy`` [L, H] and ``dla_mlp.npy`` [L]: each head's and each FFN's direct contribution
  to that logit (difference) in the clean run (explorer/core/analysis/dla.py);
* a CSV copy of each, rows and columns labelled (layers, heads, ``position:token``), and
  ``patch.json`` with the prompts, tokens, the two baselines and the counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.commands import add_model_arguments, add_prompt_or_chat, encode_chat_args, load_model, read_chat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_prompt_or_chat(parser, "the prompt whose activations are patched in", "--chat", ("--clean",))
    corrupt = parser.add_mutually_exclusive_group(required=True)
    corrupt.add_argument("--corrupt", help="a prompt of the same length that differs in a few tokens")
    corrupt.add_argument("--corrupt-chat", type=Path, metavar="FILE.json",
                         help="a conversation that renders to as many tokens as --chat's and differs in a few")
    parser.add_argument("--target", required=True, help="the token whose logit is measured (text of one token)")
    parser.add_argument("--distractor", default=None, help="measure target minus this token's logit")
    parser.add_argument("--position", type=int, default=-1, help="where the logit is read (default: the last token)")
    parser.add_argument("--batch-size", type=int, default=32, help="patched runs per forward pass (32)")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the directory to write into")


def token_id(tokenizer, text: str, what: str) -> int:
    """The single token ``text`` encodes to (a leading space is part of many tokens)."""
    from explorer.core.interventions.spec import InterventionError

    ids = tokenizer.encode(text)
    if len(ids) != 1:
        shown = " ".join(repr(tokenizer.display(i)) for i in ids)
        raise InterventionError(f"the {what} {text!r} is {len(ids)} tokens ({shown}), not one")
    return ids[0]


def run(args: argparse.Namespace) -> int:
    from explorer.core.analysis.dla import direct_logit_attribution
    from explorer.core.display.labels import token_labels
    from explorer.core.export import write_matrix_csv, write_npy, write_text
    from explorer.core.interventions.patching import activation_patching
    from explorer.core.interventions.spec import InterventionError

    chats = read_chat(args.chat), read_chat(args.corrupt_chat)
    loaded = load_model(args)
    tok = loaded.tokenizer
    spans = None
    if chats[0] is not None:  # conversations through the model's chat template
        encoded = encode_chat_args(loaded, chats[0], args)
        clean, spans = list(encoded.ids), encoded.spans
    else:
        clean = tok.encode(args.clean)
    corrupt = list(encode_chat_args(loaded, chats[1], args).ids) if chats[1] is not None else tok.encode(args.corrupt)
    if not clean or not corrupt:
        raise InterventionError("both prompts need at least one token")
    target = token_id(tok, args.target, "target")
    distractor = token_id(tok, args.distractor, "distractor") if args.distractor is not None else None

    def progress(update) -> None:
        print(f"\rpatched {update.done}/{update.total}", end="", file=sys.stderr, flush=True)

    result = activation_patching(loaded.model, clean, corrupt, target, distractor, args.position,
                                 batch_size=args.batch_size, progress=progress)
    print(file=sys.stderr)
    dla = direct_logit_attribution(loaded.trace_ids(clean, chat=spans), target, result.position, distractor)
    cfg = loaded.config
    L, H = cfg.n_layers, cfg.n_heads
    labels = token_labels(tok.displays(clean))
    layers = [f"L{layer}" for layer in range(L)]
    heads = [f"H{h}" for h in range(H)]
    out = args.out
    write_npy(out / "resid_patch.npy", result.resid)
    write_matrix_csv(out / "resid_patch.csv", result.resid, layers + ["final"], labels, corner="stream\\position")
    write_npy(out / "head_patch.npy", result.heads)
    write_matrix_csv(out / "head_patch.csv", result.heads, layers, heads, corner="layer\\head")
    write_npy(out / "dla_heads.npy", dla.heads)
    write_matrix_csv(out / "dla_heads.csv", dla.heads, layers, heads, corner="layer\\head")
    write_npy(out / "dla_mlp.npy", dla.mlp)
    write_matrix_csv(out / "dla_mlp.csv", dla.mlp[:, None], layers, ["mlp"], corner="layer")
    summary = {
        "clean": args.clean if chats[0] is None else chats[0],
        "corrupt": args.corrupt if chats[1] is None else chats[1], "tokens": labels,
        "corrupt_tokens": token_labels(tok.displays(corrupt)),
        "target": {"id": target, "text": tok.display(target)},
        "distractor": None if distractor is None else {"id": distractor, "text": tok.display(distractor)},
        "position": result.position, "clean_metric": result.clean_metric, "corrupt_metric": result.corrupt_metric,
        "dla": {"embed": dla.embed, "attn_bias": dla.attn_bias.tolist(), "norm_bias": dla.norm_bias,
                "unembed_bias": dla.unembed_bias, "logit": dla.logit},
        "patched_runs": result.runs, "batches": result.batches, "seconds": round(result.seconds, 3),
    }
    write_text(out / "patch.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(f"clean {result.clean_metric:.3f}, corrupted {result.corrupt_metric:.3f} at position {result.position}; "
          f"{result.runs} patched runs in {result.batches} batches ({result.seconds:.1f} s); wrote {out}")
    from explorer.core.interventions.patching import gap_warning

    warning = gap_warning(result.clean_metric, result.corrupt_metric)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
