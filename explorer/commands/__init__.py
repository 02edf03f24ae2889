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
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="the precision the numbers are computed in (the CPU: float32 or bfloat16)")
    parser.add_argument("--weights", default="auto", choices=["auto", "keep", "dequantize", "bfloat16", "float16"],
                        help="how the weights are held: keep = as the file stores them (GGUF blocks, half "
                             "precision), dequantised as each layer runs, the same numbers in less memory; "
                             "dequantize = all in --dtype at load (the fastest); bfloat16/float16 = matrices in "
                             "that precision, computed in --dtype; auto (default) = keep for a quantised GGUF "
                             "file, else dequantize when it fits")
    place = parser.add_argument_group("models bigger than the machine (needs accelerate: pip install "
                                      "'transformer-explorer[offload]')")
    place.add_argument("--device-map", choices=["auto", "balanced", "sequential"], default=None,
                       help="lay the blocks out across the GPUs, CPU memory and disk (a block is never split)")
    place.add_argument("--max-memory", default=None, metavar="DEV=SIZE,...",
                       help="memory each device may hold, e.g. cuda:0=20GiB,cpu=48GiB (implies --device-map auto)")
    place.add_argument("--offload-dir", default=None, metavar="DIR",
                       help="folder for the blocks that fit nowhere else (one safetensors file per block, in a "
                            "new subfolder)")


def add_intervention_arguments(parser: argparse.ArgumentParser) -> None:
    """--ablate SPEC (repeatable) and --ablate-mode: run the model with components switched off."""
    parser.add_argument("--ablate", action="append", default=[], metavar="SPEC",
                        help="switch a component off (repeatable): L.H a head, mlpL:N a neuron, attnL / mlpL a "
                             "whole sublayer; expertL:E an expert (expertL:E:force into the top-k, expertL:E:x0.5 "
                             "its router logit scaled; @P,Q at those tokens only)")
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


def placement_from(args: argparse.Namespace):
    """The Placement the options ask for, or None (the model on one device, as usual)."""
    from explorer.core.placement import Placement, parse_max_memory

    strategy, budget, folder = (getattr(args, name, None) for name in ("device_map", "max_memory", "offload_dir"))
    if strategy is None and budget is None and folder is None:
        return None
    return Placement(strategy or "auto", parse_max_memory(budget), folder)


def load_model(args: argparse.Namespace):
    from explorer.core.checkpoint import load_checkpoint

    return load_checkpoint(args.checkpoint, device=args.device, dtype=args.dtype, placement=placement_from(args),
                           weights=getattr(args, "weights", "auto"))


def add_prompt_or_chat(parser: argparse.ArgumentParser, prompt_help: str, chat_flag: str = "--chat",
                       prompt_flags: tuple[str, ...] = ("--prompt", "-p")) -> None:
    """The text to run: a raw ``--prompt``, or a conversation ``--chat FILE.json`` through the checkpoint's
    chat template (with ``--chat-option`` and ``--no-generation-prompt``)."""
    from pathlib import Path

    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(*prompt_flags, help=prompt_help)
    group.add_argument(chat_flag, type=Path, metavar="FILE.json",
                       help='a conversation: a JSON list of {"role": "system"|"user"|"assistant", "content": TEXT} '
                            "rendered with the checkpoint's own chat template")
    if not any(a.dest == "chat_option" for a in parser._actions):
        parser.add_argument("--chat-option", action="append", default=[], metavar="KEY=VALUE",
                            help="an option the chat template reads, e.g. enable_thinking=false or "
                                 "reasoning_effort=low (VALUE is read as JSON when it parses, else as text)")
        parser.add_argument("--no-generation-prompt", action="store_true",
                            help="with --chat: do not open the assistant's turn after the last message")


def chat_options(args: argparse.Namespace) -> dict:
    """``--chat-option KEY=VALUE`` as a dict (checked before the model loads)."""
    import json

    from explorer.core.chat.encode import checked_options

    options = {}
    for text in getattr(args, "chat_option", []):
        key, sep, value = text.partition("=")
        if not sep:
            from explorer.core.errors import ExplorerError

            raise ExplorerError(f"--chat-option {text!r:.60} should be KEY=VALUE")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    return checked_options(options)


def read_chat(path) -> list | None:
    """The conversation of ``--chat FILE`` (checked before the model loads), None without one."""
    if path is None:
        return None
    from explorer.core.chat.messages import read_chat_file

    return read_chat_file(path)


def encode_chat_args(loaded, messages: list, args: argparse.Namespace):
    """``messages`` through the model's template with the command's options; prints what was rendered."""
    import sys

    encoded = loaded.encode_chat(messages, not getattr(args, "no_generation_prompt", False), **chat_options(args))
    print(f"conversation: {len(messages)} messages through the {encoded.spans.template}: {len(encoded.ids)} tokens",
          file=sys.stderr)
    return encoded
