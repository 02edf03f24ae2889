from __future__ import annotations

import argparse
import json

from explorer.commands import add_model_arguments, load_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")


def run(args: argparse.Namespace) -> int:
    info = load_model(args).info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            label = key.replace("_", " ")
            print(f"{label:<{width}}  {value:,}" if isinstance(value, int) else f"{label:<{width}}  {value}")
    return 0
