"""The Jinja environment a chat template is rendered in, the one ``transformers`` builds
(``transformers.utils.chat_template_utils._cached_compile_jinja_template``), and the child process
that renders an untrusted template under limits.

The environment: jinja2's ``ImmutableSandboxedEnvironment`` (no attribute starting with ``_``, no
method that changes a list or a dict, ``range`` capped at 100,000 items), ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and a ``{% generation %}`` tag that renders its body;
the filter ``tojson`` (no HTML escaping, ``indent``/``separators``/``sort_keys``) and the globals
``raise_exception``, ``strftime_now``, ``dict`` and ``namespace`` (no underscore names), as transformers
has them. There is no loader: ``{% include %}``/``{% import %}`` find nothing.

Run as a script (``python -I -S jinja_env.py SITE_DIR...``) it is the render child of ``sandbox.py``:
it limits its own address space and CPU time first, reads one JSON request from stdin (a template
and the contexts to render it with), and writes one JSON reply to stdout: the rendered texts, the
variables the template reads, or ``{"error": kind, "message": ...}``. A render whose output passes
``max_chars`` stops there. This file imports nothing from the explorer, so the child runs with no
project code on its path (``-I -S``: no current directory, no PYTHONPATH, no site hooks).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

ERROR_KINDS = ("syntax", "security", "raised", "too_long", "recursion", "memory", "failed")


def environment() -> Any:
    """A fresh sandboxed environment with transformers' extensions, filters and globals."""
    import jinja2
    import jinja2.ext
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):  # transformers' AssistantTracker, without the tracking
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:  # noqa: A002 - the name templates call it with
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's own signature trick
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace cannot hold the name {name!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


class TooLong(Exception):
    pass


def render_capped(template: Any, context: dict[str, Any], max_chars: int) -> str:
    """The template rendered with ``context``, stopped once the text passes ``max_chars``."""
    pieces, total = [], 0
    for piece in template.generate(**context):
        total += len(piece)
        if total > max_chars:
            raise TooLong(f"its output passed {max_chars:,} characters")
        pieces.append(piece)
    return "".join(pieces)


def _names_in_order(tree: Any) -> list[Any]:
    """The template's ``Name`` nodes in the order a render meets them: an assignment's value before its
    target, a loop's iterable before its variable (an explicit stack: templates can nest deeply)."""
    from jinja2 import nodes

    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.Name):
            out.append(node)
            continue
        if isinstance(node, nodes.Assign):
            children = [node.node, node.target]
        elif isinstance(node, nodes.AssignBlock):
            children = [*node.body, *([node.filter] if node.filter else []), node.target]
        elif isinstance(node, nodes.With):
            children = [*node.values, *node.targets, *node.body]
        elif isinstance(node, nodes.For):
            children = [node.iter, node.target, *([node.test] if node.test else []), *node.body, *node.else_]
        else:
            children = list(node.iter_child_nodes())
        stack.extend(reversed(children))
    return out


def variables(env: Any, text: str) -> list[str]:
    """The names the template reads that it does not set itself (its data and options).

    Jinja counts a name set inside an ``if`` or a loop as read from outside (a branch that does not set it
    would), so a name is kept only when the template reads it before it first sets it: Gemma 4's
    ``captured_content`` is its own, ``{% set enable_thinking = enable_thinking | default(false) %}`` and
    Llama 3's ``{% if not date_string is defined %}{% set date_string = ... %}`` are options."""
    from jinja2 import meta

    tree = env.parse(text)
    first: dict[str, str] = {}
    for name in _names_in_order(tree):
        first.setdefault(name.name, name.ctx)
    return sorted(n for n in meta.find_undeclared_variables(tree) if first.get(n, "load") == "load")


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """One request: {"template", "contexts": [...], "max_chars"} -> {"texts", "variables"} or an error."""
    import jinja2

    try:
        env = environment()
        text = request["template"]
        template = env.from_string(text)
        names = variables(env, text)
        texts = [render_capped(template, context, int(request["max_chars"])) for context in request["contexts"]]
        return {"texts": texts, "variables": names}
    except jinja2.exceptions.TemplateSyntaxError as exc:
        return {"error": "syntax", "message": f"line {exc.lineno}: {exc.message}"}
    except jinja2.exceptions.SecurityError as exc:
        return {"error": "security", "message": str(exc)}
    except jinja2.exceptions.TemplateError as exc:
        return {"error": "raised", "message": str(exc) or type(exc).__name__}
    except TooLong as exc:
        return {"error": "too_long", "message": str(exc)}
    except RecursionError:
        return {"error": "recursion", "message": "the template recursed too deeply"}
    except MemoryError:
        return {"error": "memory", "message": "the template needed more memory than a render may use"}
    except Exception as exc:  # noqa: BLE001 - whatever the template's data did: one line back to the parent
        return {"error": "failed", "message": f"{type(exc).__name__}: {exc}"}


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    try:
        import resource
    except ImportError:  # Windows: the parent's wall-clock limit and the output cap still hold
        return
    for which, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_seconds)):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))


def main() -> None:
    memory, cpu = int(sys.argv[1]), int(sys.argv[2])
    sys.path[:0] = sys.argv[3:]  # where jinja2 and markupsafe are installed, and nothing else
    import jinja2  # noqa: F401 - imported before the limit, so that its import is not what runs out
    import jinja2.ext  # noqa: F401
    import jinja2.meta  # noqa: F401
    import jinja2.sandbox  # noqa: F401

    _limit(memory, cpu)
    sys.setrecursionlimit(400)
    raw = sys.stdin.buffer.read()
    try:
        reply = handle(json.loads(raw))
    except MemoryError:
        reply = {"error": "memory", "message": "the template needed more memory than a render may use"}
    sys.stdout.write(json.dumps(reply, ensure_ascii=True))


if __name__ == "__main__":
    main()
