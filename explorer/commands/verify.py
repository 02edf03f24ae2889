"""``transformer-explorer verify``: this app's model against transformers' eager model from the same files.

One line per layer (the residual stream leaving it, its attention patterns), a last line with the
logits' and token ids' largest differences; exit 0 within tolerance, 1 outside it (naming the first
layer that differs), 2 for bad input or a checkpoint transformers cannot read. A GGUF file is
checked against transformers' own GGUF loading of it (``core/verify_gguf.py``).
"""

from __future__ import annotations

import argparse
import functools


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", "-c", required=True,
                        help="a Hugging Face checkpoint directory (config.json and weights), a file in one, "
                             "a cached org/name, or a GGUF file (checked against transformers' GGUF loading)")
    parser.add_argument("--prompt", "-p", default=None,
                        help="the text both models read (default: a short sentence; token ids for a "
                             "checkpoint without a tokenizer)")


def run(args: argparse.Namespace) -> int:
    from explorer.core.verify import verify_checkpoint

    _quiet_transformers()
    report = verify_checkpoint(args.checkpoint, args.prompt)
    for line in report.lines():
        print(line)
    return 0 if report.passed else 1


def _quiet_transformers() -> None:
    """transformers' progress bars and config warnings would bury the table."""
    try:
        from transformers.utils import logging
    except ImportError:
        return  # verify_checkpoint says how to install it
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:  # its GGUF loading draws a tqdm bar of its own, which the switch above does not reach
        from transformers import modeling_gguf_pytorch_utils as gguf_loading
    except ImportError:
        return
    if not isinstance(getattr(gguf_loading, "tqdm", None), functools.partial):
        gguf_loading.tqdm = functools.partial(gguf_loading.tqdm, disable=True)
