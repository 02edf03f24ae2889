from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from explorer.commands import (
    add_prompt_or_chat,
    chat_options,
    encode_chat_args,
    read_chat,
    add_intervention_arguments,
    add_model_arguments,
    add_steer_arguments,
    check_steers,
    interventions_from,
    load_model,
    steers_from,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_intervention_arguments(parser)
    add_steer_arguments(parser)
    add_prompt_or_chat(parser, "the text to run through the model")
    parser.add_argument("--out", "-o", required=True, type=Path,
                        help="the folder to write into: new, empty, or an earlier export (its own files are replaced "
                             "when the new ones are complete; other files in it are kept)")
    parser.add_argument("--per-head", action="store_true",
                        help="also write attention/L{layer}_H{head}.npy and .csv per head (large: 13.5 MB "
                             "of CSV per head at 1024 tokens)")
    parser.add_argument("--compress", action="store_true", help="deflate trace.npz (smaller, much slower)")
    parser.add_argument("--plots", action="store_true",
                        help="also render every panel offscreen: one PNG per panel and per head")
    parser.add_argument("--backend", choices=["default", "nnsight"], default="default",
                        help="nnsight: trace the Hugging Face directory through nnsight instead (needs "
                             "'transformer-explorer[remote]'); trace.npz then holds the compact set under Trace "
                             "keys (blocks.L.resid_pre, attn.q/k/v/pattern, resid_final, last_logits)")


def run(args: argparse.Namespace) -> int:
    from explorer.core.export import export_directory, write_attention_files, write_trace_npz

    started = time.perf_counter()

    def say(text: str) -> None:  # progress on stdout: stderr carries only a failure's one line
        print(f"[{time.perf_counter() - started:6.1f} s] {text}", flush=True)

    interventions = interventions_from(args)  # a bad spec fails before the model loads
    check_steers(args)
    messages, _ = read_chat(args.chat), chat_options(args)
    if args.backend == "nnsight":
        if messages is not None:
            from explorer.core.errors import ExplorerError

            raise ExplorerError("--backend nnsight takes a raw --prompt, not --chat")
        return _run_nnsight(args, say)
    loaded = load_model(args)
    interventions += steers_from(args, loaded)
    prompt = args.prompt
    if messages is None:
        trace = loaded.trace(args.prompt, interventions=interventions)
    else:  # the conversation through the model's chat template; the trace knows each token's turn
        encoded = encode_chat_args(loaded, messages, args)
        n = len(encoded.ids)
        trace = loaded.trace_ids(list(encoded.ids)[: loaded.config.n_ctx], None,
                                 n if n > loaded.config.n_ctx else None, interventions=interventions,
                                 chat=encoded.spans)
        prompt = encoded.text
    say(f"traced {trace.n_tokens} tokens (forward pass {trace.meta.forward_seconds:.2f} s)")
    if trace.meta.truncated_from:
        print(f"note: the prompt has {trace.meta.truncated_from} tokens; only the first "
              f"{trace.n_tokens} fit the context", file=sys.stderr)
    from explorer.core.analysis.numerics import first_nonfinite

    bad = first_nonfinite(trace)
    if bad is not None:  # exported as computed, but never silently
        print(f"warning: the model's numbers are not finite: {bad.describe()}", file=sys.stderr)
    written = []
    record = _provenance(args, loaded, trace, say, prompt)
    # every file goes into a staging folder; the export's own files are swapped in when all are written
    with export_directory(args.out) as out:
        from explorer.core import provenance

        provenance.write(out / provenance.FILE, record)  # what produced these numbers
        write_trace_npz(trace, out / "trace.npz", progress=say, compress=args.compress, provenance=record)
        written.append("trace.npz")
        from explorer.core.interop import write_trace_safetensors  # the same trace under TransformerLens' names

        write_trace_safetensors(trace, out / "trace.safetensors", prompt, provenance=record)
        written.append("trace.safetensors")
        if args.per_head:
            files = write_attention_files(trace, out / "attention", progress=say)
            written.append(f"{len(files)} attention files")
        if args.plots:
            from explorer.ui.offscreen import render_plots

            pngs = render_plots(loaded, trace, out / "plots", progress=say)
            written.append(f"{len(pngs)} plot images")
    say("done")
    print(f"wrote {', '.join(written)} for {trace.n_tokens} tokens to {args.out}")
    return 0


def _provenance(args: argparse.Namespace, loaded, trace, say, prompt: str) -> dict:
    """The export's provenance record, with the SHA-256 of the model's files (read once more, with progress)."""
    from explorer.core import provenance
    from explorer.core.model_files import fingerprint

    source = args.checkpoint if args.checkpoint is not None else loaded.source
    last = [-1]

    def hashing(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != last[0]:
            last[0] = tenth
            say(f"hashing the model's files: {done / 2**20:.0f} of {total / 2**20:.0f} MB")

    files = fingerprint(source, progress=hashing)
    return provenance.record(trace, source=str(source), fingerprint=files, model_name=loaded.name,
                             what="transformer-explorer export", prompt=prompt)


def _run_nnsight(args: argparse.Namespace, say) -> int:
    """The second engine (core/remote/): the directory through nnsight, the compact set to trace.npz."""
    import numpy as np

    from explorer.core.errors import ExplorerError
    from explorer.core.export import atomic_path, export_directory
    from explorer.core.remote.backend import compact_arrays, trace_directory

    if args.checkpoint is None or args.ablate or getattr(args, "steer", []) or args.plots or args.per_head:
        raise ExplorerError("--backend nnsight takes a Hugging Face directory (--checkpoint) and no --ablate, "
                            "--steer, --plots or --per-head")
    trace = trace_directory(args.checkpoint, args.prompt)
    say(f"traced {trace.n_tokens} tokens through nnsight ({trace.meta.forward_seconds:.2f} s)")
    with export_directory(args.out) as out, atomic_path(out / "trace.npz") as tmp:
        with open(tmp, "wb") as f:
            (np.savez_compressed if args.compress else np.savez)(f, **compact_arrays(trace))
    say("done")
    print(f"wrote trace.npz (nnsight backend) for {trace.n_tokens} tokens to {args.out}")
    return 0
