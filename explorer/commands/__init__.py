"""Headless subcommands of ``transformer-explorer`` (see ``explorer.cli``)."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every model-using command shares."""
    parser.add_argument("--checkpoint", "-c", default=None,
                        help="a checkpoint directory, a file inside one, a .gguf file, an Ollama model name "
                             "(llama3.2:1b), or a built-in model name "
                             "(default: the bundled default model)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def add_intervention_arguments(parser: argparse.ArgumentParser) -> None:
    """--ablate SPEC (repeatable) and --ablate-mode: run the model with components switched off."""
    parser.add_argument("--ablate", action="append", default=[], metavar="SPEC",
                        help="switch a component off (repeatable): L.H a head, mlpL:N a neuron, attnL / mlpL a "
                             "whole sublayer")
    parser.add_argument("--ablate-mode", default="zero", choices=["zero", "mean"],
                        help="zero, or the mean over the prompt's positions (default zero)")


def interventions_from(args: argparse.Namespace) -> list:
    from explorer.core.interventions.spec import parse_spec

    return [parse_spec(spec, args.ablate_mode) for spec in getattr(args, "ablate", [])]


def load_model(args: argparse.Namespace):
    from explorer.core.checkpoint import load_checkpoint

    return load_checkpoint(args.checkpoint, device=args.device, dtype=args.dtype)
