from __future__ import annotations

import argparse
import json

from explorer.commands import add_model_arguments, load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.add_argument("--tensors", action="store_true",
                        help="also list each tensor of a GGUF file with its quantisation type")


def memory_table(args: argparse.Namespace) -> dict[str, str]:
    """Each way of holding the weights with its memory, read from the headers before loading (core/quant/plan.py)."""
    from explorer.core.checkpoint import default_model_name
    from explorer.core.quant.plan import choose, memory_options

    from explorer.core.errors import ExplorerError

    try:
        options = memory_options(args.checkpoint or default_model_name(), args.device, args.dtype)
    except (ExplorerError, OSError):  # a file the load below reports on, in its own words
        return {}
    best = choose(options)
    return {f"--weights {o.weights}": f"{o.nbytes / 1e9:,.2f} GB, {'fits' if o.fits else 'does not fit'}"
            f"{' (auto picks it)' if o is best and args.weights == 'auto' else ''}: {o.label}" for o in options}


def run(args: argparse.Namespace) -> int:
    memory = memory_table(args)
    loaded = load_model(args)
    info = loaded.info()
    if memory:
        info["memory"] = memory
    if args.tensors:  # a GGUF file: each tensor's type (the numbers shown are its dequantised weights')
        info["tensors"] = dict(loaded.tensor_types) or "not a GGUF file: every tensor is stored in floating point"
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            label = key.replace("_", " ")
            if isinstance(value, dict):
                print(f"{label:<{width}}")
                print("\n".join(f"  {name:<40} {kind}" for name, kind in value.items()))
                continue
            print(f"{label:<{width}}  {value:,}" if isinstance(value, int) else f"{label:<{width}}  {value}")
    return 0
