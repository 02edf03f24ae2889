"""``transformer-explorer features``: a prompt through the model and one or more SAEs (SAELens directories).

Writes ``OUT/features.npz`` (atomically; nothing else in OUT is touched) with ``acts`` (float32
[n_tokens, d_sae]: the first SAE's feature activations at its hook point, every position),
``token_ids``, ``tokens`` (display strings), ``hook_name`` and ``reconstruction_error`` (|x - x_hat| / |x|
per token); with several ``--sae``, also ``acts_0``, ``acts_1``, ... and ``hook_names``. Prints the
strongest features of the last token. An SAE trained on another model is refused unless
``--allow-other-model``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.commands import add_model_arguments, add_prompt_or_chat, encode_chat_args, load_model, read_chat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--sae", action="append", required=True, type=Path, metavar="SAE_DIR",
                        help="an SAE or transcoder directory in SAELens' format (cfg.json + sae_weights.safetensors); "
                             "repeatable")
    add_prompt_or_chat(parser, "the text to run through the model")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the directory to write features.npz into")
    parser.add_argument("--top", type=int, default=10,
                        help="how many of the last token's features to print, at least 1 (10)")
    parser.add_argument("--allow-other-model", action="store_true",
                        help="use an SAE whose metadata names another model")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from explorer.core.export import atomic_path
    from explorer.core.features.analysis import reconstruction_error, top_features
    from explorer.core.errors import ArgumentError
    from explorer.core.features.sae import SAEModelMismatch, open_sae

    if args.top < 1:  # 0 or fewer printed "none fire", as if no feature fired
        raise ArgumentError(f"--top must be at least 1 (got {args.top})")
    messages = read_chat(args.chat)
    loaded = load_model(args)
    try:
        saes = [open_sae(path, loaded.config, loaded.name, args.allow_other_model) for path in args.sae]
    except SAEModelMismatch as exc:
        raise SAEModelMismatch(str(exc).replace("open it anyway", "--allow-other-model opens it anyway")) from None
    for sae in saes:
        for warning in sae.warnings:
            print(f"warning: {warning}")
    if messages is None:
        trace = loaded.trace(args.prompt)
    else:
        encoded = encode_chat_args(loaded, messages, args)
        trace = loaded.trace_ids(list(encoded.ids)[: loaded.config.n_ctx], chat=encoded.spans)
    acts = [sae.activations(trace) for sae in saes]
    arrays = {"acts": acts[0], "token_ids": np.asarray(trace.token_ids, dtype=np.int64),
              "tokens": np.asarray(trace.tokens, dtype=str), "hook_name": np.asarray(saes[0].hook.hook_name),
              "reconstruction_error": reconstruction_error(saes[0], trace, acts[0]).relative}
    if len(saes) > 1:
        arrays.update({f"acts_{i}": a for i, a in enumerate(acts)})
        arrays["hook_names"] = np.asarray([s.hook.hook_name for s in saes], dtype=str)
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out / "features.npz") as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    for sae, a in zip(saes, acts):
        ids, values = top_features(a, trace.n_tokens - 1, args.top)
        shown = ", ".join(f"{i} ({v:.3g})" for i, v in zip(ids, values)) or "none fire"
        print(f"{sae.name}: last token {trace.tokens[-1]!r}: {shown}")
    print(f"wrote features.npz ({trace.n_tokens} tokens x {saes[0].d_sae} features) to {args.out}")
    return 0
