"""Rendering an untrusted chat template: in a child process, under a time, memory and output limit.

Why a child process and not only jinja2's sandbox with counters: the sandbox stops attribute access and
mutation, but one expression can still run for hours or allocate gigabytes inside a single C call
(``{{ 10 ** 10 ** 8 }}``, ``{{ 'a' * 10 ** 10 }}``, ``{{ x | center(10 ** 10) }}``), which no counter
between operations can interrupt. A child is killed from outside after ``RENDER_SECONDS`` (wall clock),
limits its own address space (``RENDER_MEMORY``) and CPU time before it reads the template, and stops a
render whose output passes its cap; whatever goes wrong comes back as one ``ChatTemplateError`` line.
The same mechanism ``tokenize/hf_files.py`` uses for untrusted regular expressions. Cost: one Python
start per render (~80 ms); renders are cached by their exact input.

The child is ``jinja_env.py`` run as a script with ``-I -S`` (no project code, no current directory, no
PYTHONPATH on its path: only jinja2's and markupsafe's folders).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.text import shown

RENDER_SECONDS = 5.0
RENDER_MEMORY = 1 << 30  # the child's address space: Python and jinja2 take ~150 MB of it
RENDER_CPU_SECONDS = 12
BASE_OUTPUT_CHARS = 1 << 20  # a render may write this much plus four times the text it was given
MAX_TEMPLATE_CHARS = 1 << 20  # real templates are under 40 kB (gpt-oss's is 17 kB)
_CACHE: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


class ChatTemplateError(ExplorerError):
    """A chat template that is missing, unreadable, or failed to render (one line for the user)."""


_KIND_WORDS = {
    "syntax": "is not valid Jinja",
    "security": "tried to reach something outside its data (refused by the sandbox)",
    "raised": "refused the conversation",
    "too_long": "wrote too much",
    "recursion": "recursed too deeply",
    "memory": "needed more memory than a render may use",
    "failed": "failed",
}


def _site_dirs() -> list[str]:
    import jinja2
    import markupsafe

    return list(dict.fromkeys(str(Path(m.__file__).resolve().parents[1]) for m in (jinja2, markupsafe)))


def _output_cap(contexts: list[dict[str, Any]]) -> int:
    given = len(json.dumps(contexts, ensure_ascii=False))
    return BASE_OUTPUT_CHARS + 4 * given


def render_many(template: str, contexts: list[dict[str, Any]], seconds: float = RENDER_SECONDS) -> tuple[list[str], list[str]]:
    """``template`` rendered with each of ``contexts`` (JSON data only), and the names the template reads.

    Runs in a child process under the limits above; a template that does not finish, raises, or
    reaches outside its data is one ``ChatTemplateError`` line."""
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError("the chat template is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(f"the chat template has {len(template):,} characters, more than the "
                                f"{MAX_TEMPLATE_CHARS:,} a template may have")
    request = json.dumps({"template": template, "contexts": contexts, "max_chars": _output_cap(contexts)},
                         ensure_ascii=False)
    with _CACHE_LOCK:
        if request in _CACHE:
            _CACHE.move_to_end(request)
            texts, names = _CACHE[request]
            return list(texts), list(names)
    reply = _run_child(request.encode("utf-8"), seconds)
    if "error" in reply:
        kind = str(reply.get("error"))
        message = shown(str(reply.get("message", "")), 200)
        if kind in ("recursion", "memory"):
            raise ChatTemplateError(f"the chat template {_KIND_WORDS[kind]}; stopped")
        if kind == "too_long":
            raise ChatTemplateError(f"the chat template wrote too much ({message}); stopped")
        raise ChatTemplateError(f"the chat template {_KIND_WORDS.get(kind, 'failed')}: {message}")
    texts, names = reply.get("texts"), reply.get("variables")
    if not (isinstance(texts, list) and len(texts) == len(contexts) and all(isinstance(t, str) for t in texts)):
        raise ChatTemplateError("the chat template's renderer gave no text back")
    with _CACHE_LOCK:
        _CACHE[request] = (texts, list(names or []))
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return list(texts), list(names or [])


def _run_child(request: bytes, seconds: float) -> dict[str, Any]:
    if getattr(sys, "frozen", False):  # a bundled app: sys.executable is not a Python that can run the child
        raise ChatTemplateError("chat templates cannot be rendered in isolation in this build; the raw prompt "
                                "still works")
    script = Path(__file__).with_name("jinja_env.py")
    command = [sys.executable, "-I", "-S", str(script), str(RENDER_MEMORY), str(RENDER_CPU_SECONDS), *_site_dirs()]
    try:
        done = subprocess.run(command, input=request, capture_output=True, timeout=seconds,
                              env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    except subprocess.TimeoutExpired:
        raise ChatTemplateError(f"the chat template did not finish rendering within {seconds:.0f} s "
                                "(a loop that does not end?); stopped") from None
    except OSError as exc:
        raise ChatTemplateError(f"cannot start the chat template's renderer: {exc}") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace")
        if "MemoryError" in err or done.returncode in (-9, 137):
            raise ChatTemplateError("the chat template needed more memory than a render may use; stopped")
        if done.returncode in (-24, 152):  # SIGXCPU
            raise ChatTemplateError("the chat template used more CPU time than a render may; stopped")
        lines = [line for line in err.splitlines() if line.strip()]
        raise ChatTemplateError(f"the chat template's renderer stopped: {shown(lines[-1] if lines else done.returncode, 160)}")
    try:
        reply = json.loads(done.stdout)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ChatTemplateError("the chat template's renderer gave an unreadable answer") from None
    if not isinstance(reply, dict):
        raise ChatTemplateError("the chat template's renderer gave an unreadable answer")
    return reply
