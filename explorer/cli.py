"""``transformer-explorer``: with a subcommand, a headless tool; without one, the desktop app.

Each subcommand lives in ``explorer/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``; ``COMMANDS`` lists them. User errors print one line and exit with status 2; anything else is an "internal error" line
(status 1), with the traceback only under ``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

COMMANDS = {
    "info": "describe a checkpoint: architecture, parameters, vocabulary, context, device",
    "export": "run a prompt and write trace.npz, trace.safetensors and per-head attention files",
    "generate": "continue a prompt, printing the continuation (and optionally each step)",
    "features": "run a prompt through the model and an SAE; write its feature activations to features.npz",
    "patch": "activation patching between a clean and a corrupted prompt, and direct logit attribution",
    "train": "train one of the built-in models (shakespeare, induction) from scratch",
    "compare": "two models on the same prompt: residual cosines, attention and next-token divergences to compare.npz",
    "verify": "check a Hugging Face checkpoint or GGUF file against transformers' own model, layer by layer",
    "qk": "why a head attends from one token to another: its score split exactly into query part x key part terms",
    "ov": "what a head moves: its output split by source token, and what each token would add to the logits",
    "get": "download a model from the Hugging Face Hub into its cache (only when asked; resumable)",
    "corpus": "run a model over a corpus: every neuron's, feature's and head's evidence in a database (merge, info)",
}


WINDOW_USAGE = """\
without a command, the desktop window opens:
  transformer-explorer [CHECKPOINT] [--device {auto,cpu,cuda,mps}] [--dtype {float32,bfloat16,float16}]
    CHECKPOINT  a checkpoint directory, a file inside one, a .gguf file, an Ollama model
                name (llama3.2:1b), or a built-in model name
                (default: the last one opened, else the bundled default model)
    --device    where the model runs (default: auto)
    --dtype     the precision it runs in (default: float32)
  The window needs a display; the commands above work without one.

each command has its own --help: transformer-explorer generate --help"""


def _command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer-explorer",
                                     description="Look inside a transformer language model: the desktop window, "
                                                 "or a headless command.",
                                     epilog=WINDOW_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def _unknown_command(word: str) -> str | None:
    """A first argument that is neither a command, an option, an existing path nor a built-in model name."""
    if word.startswith("-") or "/" in word or os.sep in word or Path(word).expanduser().exists():
        return None
    from explorer.core.checkpoint import builtin_names

    if word in builtin_names():
        return None
    from explorer.core.checkpoint.local_stores import ollama_parts

    if ":" in word and ollama_parts(word) is not None:  # an Ollama model name: load_checkpoint says if it is missing
        return None
    close = difflib.get_close_matches(word, list(COMMANDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"unknown command {word!r}{hint}; commands: {', '.join(COMMANDS)}; to open the app on a checkpoint, "
            "give its directory (it does not exist here) or a built-in model name")


def report(exc: BaseException, debug: bool, doing: str = "") -> int:
    """The one error path of the command line: one line on stderr (and the traceback under --debug); exit status.
    The line is escaped and capped (``explorer.core.text.shown``): names from files cannot drive the terminal."""
    import builtins

    from explorer.core.errors import ExplorerError, InternalError
    from explorer.core.text import MESSAGE_LIMIT, shown

    def print(text: str, file=sys.stderr) -> None:  # noqa: A001 - every line below goes through here
        builtins.print(shown(text, MESSAGE_LIMIT), file=file)

    if isinstance(exc, MemoryError):
        print(f"error: ran out of memory {('while ' + doing) if doing else ''}: try a shorter prompt, a smaller "
              "model or --dtype bfloat16", file=sys.stderr)
        status = 2
    elif isinstance(exc, InternalError) or not isinstance(exc, (ExplorerError, OSError)):
        text = str(exc) if isinstance(exc, InternalError) else str(InternalError.wrap(exc, doing))
        print(f"error: {text}" + ("" if debug else "; run with --debug for the traceback"), file=sys.stderr)
        status = 1
    elif isinstance(exc, OSError):
        why = "permission denied" if isinstance(exc, PermissionError) else str(exc.strerror or exc).lower()
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f) or "a file"
        print(f"error: {doing or 'the command'} failed: cannot write {where} ({why})", file=sys.stderr)
        status = 2
    else:
        print(f"error: {exc}", file=sys.stderr)
        status = 2
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    return status


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """While a command runs, SIGTERM (``kill``, ``timeout``) ends it as an exit does: the clean-ups run (an
    export rolls back, offloaded weights are removed) instead of the process vanishing mid-step."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        args = _command_parser().parse_args(argv)
        try:
            with _terminate_as_exit():
                return int(args.run(args) or 0)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # noqa: BLE001 - every failure ends as one line
            return report(exc, debug, {"export": "exporting"}.get(args.command, args.command))
    if argv:
        problem = _unknown_command(argv[0])
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    from explorer.ui.app import main as gui_main

    return gui_main(argv)


if __name__ == "__main__":
    sys.exit(main())
