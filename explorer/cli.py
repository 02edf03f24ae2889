"""``transformer-explorer``: with a subcommand, a headless tool; without one, the desktop app.

Each subcommand lives in ``explorer/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``; ``COMMANDS`` lists them. User errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "info": "describe a checkpoint: architecture, parameters, vocabulary, context, device",
    "export": "run a prompt and write trace.npz and per-head attention files",
    "generate": "continue a prompt, printing the continuation (and optionally each step)",
    "patch": "activation patching between a clean and a corrupted prompt, and direct logit attribution",
    "train": "train one of the built-in models (shakespeare, induction) from scratch",
}


def _command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer-explorer",
                                     description="Look inside a transformer language model.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        try:
            module = importlib.import_module(f"explorer.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"explorer.commands.{name}":
                raise
            continue
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        from explorer.core.errors import ExplorerError

        args = _command_parser().parse_args(argv)
        try:
            return int(args.run(args) or 0)
        except ExplorerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    from explorer.ui.app import main as gui_main

    return gui_main(argv)


if __name__ == "__main__":
    sys.exit(main())
