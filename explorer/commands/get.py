"""``transformer-explorer get REPO``: fetch a model from the Hugging Face Hub into the Hugging Face cache,
with progress on the terminal; Ctrl-C stops it and the next ``get`` resumes (core/download)."""

from __future__ import annotations

import argparse
import os
import sys

from explorer.core.download import SUGGESTED, Progress, download, plan_download


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", nargs="?", help="the repository id, org/name (without it: the suggested models)")
    parser.add_argument("--revision", default=None, help="a branch, tag or commit (default: main)")
    parser.add_argument("--gguf", default=None, metavar="FILE", help="fetch this one GGUF file of the repository")
    parser.add_argument("--token", default=None,
                        help="a Hugging Face token for gated or private models (default: $HF_TOKEN or the one "
                             "`hf auth login` saved)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be fetched, fetch only its small files")


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n)} B"


def line(p: Progress) -> str:
    """'412.3 MB of 1.5 GB (27%), 38.2 MB/s, 29 s left: model.safetensors'"""
    share = 100 * p.done_bytes / p.total_bytes if p.total_bytes else 100
    speed = f", {_size(p.bytes_per_second)}/s" if p.bytes_per_second else ""
    left = f", {p.seconds_left:,.0f} s left" if p.seconds_left is not None and p.bytes_per_second else ""
    return f"{_size(p.done_bytes)} of {_size(p.total_bytes)} ({share:.0f}%){speed}{left}: {p.file}"


def run(args: argparse.Namespace) -> int:
    if args.repo is None:
        print("Suggested models (transformer-explorer get ORG/NAME):")
        for s in SUGGESTED:
            gated = " (gated: needs a token)" if s.gated else ""
            print(f"  {s.repo_id:<38} {_size(s.disk_bytes):>9} on disk, {_size(s.memory_bytes):>9} in memory: "
                  f"{s.good_for}{gated}")
        return 0
    token = args.token or os.environ.get("HF_TOKEN") or None
    plan = plan_download(args.repo, args.revision, args.gguf, token=token)
    missing = plan.missing_bytes()
    print(f"{plan.repo_id} at {plan.commit[:12]}: {len(plan.files)} files, {_size(plan.total_bytes)}"
          + (f", {_size(missing)} to fetch" if missing != plan.total_bytes else "") + f" -> {plan.snapshot}")
    if args.dry_run:
        for f in plan.files:
            print(f"  {f.name:<40} {_size(f.size):>10}")
        return 0
    terminal = sys.stdout.isatty()

    def show(p: Progress) -> None:
        if terminal:
            print("\r\033[K" + line(p), end="", flush=True)

    try:
        path = download(plan, progress=show, token=token)
    except KeyboardInterrupt:
        print(("\n" if terminal else "") + f"stopped: what was fetched is kept; `transformer-explorer get "
              f"{plan.repo_id}` again resumes it", file=sys.stderr)
        return 130
    if terminal:
        print()
    print(f"done: open it with  transformer-explorer {plan.repo_id}" + (f"  (the file: {path})" if plan.gguf else ""))
    return 0
