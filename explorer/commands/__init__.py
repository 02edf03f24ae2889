"""Headless subcommands of ``transformer-explorer`` (see ``explorer.cli``)."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every model-using command shares."""
    parser.add_argument("--checkpoint", "-c", default=None,
                        help="a checkpoint directory, a file inside one, or a built-in model name "
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


def add_steer_arguments(parser: argparse.ArgumentParser) -> None:
    """--steer L:FILE.npy:ALPHA (repeatable): ALPHA times the vector in FILE added to the residual stream
    entering block L at every position."""
    parser.add_argument("--steer", action="append", default=[], metavar="L:FILE.npy:ALPHA",
                        help="add ALPHA times the vector in FILE (float32, length d_model) to the residual stream "
                             "entering block L, at every position (repeatable)")


def check_steers(args: argparse.Namespace) -> None:
    """The --steer values' form, before the model loads."""
    from explorer.core.features.steering import split_steer

    for text in getattr(args, "steer", []):
        split_steer(text)


def steers_from(args: argparse.Namespace, loaded) -> list:
    from explorer.core.features.steering import parse_steer

    cfg = loaded.config
    return [parse_steer(text, cfg.d_model, cfg.n_layers) for text in getattr(args, "steer", [])]


def interventions_from(args: argparse.Namespace) -> list:
    from explorer.core.interventions.spec import parse_spec

    return [parse_spec(spec, args.ablate_mode) for spec in getattr(args, "ablate", [])]


def load_model(args: argparse.Namespace):
    from explorer.core.checkpoint import load_checkpoint

    return load_checkpoint(args.checkpoint, device=args.device, dtype=args.dtype)
