"""The layout rules of ARCHITECTURE.md, checked rather than hoped for.

* no import cycle among the modules of ``explorer`` (imports only a type checker sees excluded);
* every module under ``explorer/core`` imports in a fresh interpreter in which PySide6, shiboken6,
  pyqtgraph and superqt cannot be imported at all (the core is Qt-free);
* the import-linter contracts in pyproject.toml hold (core never imports Qt; ui never imports torch);
* ARCHITECTURE.md's picture names every package of ``explorer`` and only paths that exist.
"""

from __future__ import annotations

import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

import explorer

ROOT = Path(__file__).resolve().parents[1]


def _cycles(adjacency: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for other in sorted(adjacency[module]):
            if state.get(other) == 1:
                found.append(stack[stack.index(other):] + [other])
            elif other not in state:
                visit(other, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(adjacency):
        if module not in state:
            visit(module, [])
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    graph = grimp.build_graph("explorer", include_external_packages=False, exclude_type_checking_imports=True)
    adjacency = {m: set(graph.find_modules_directly_imported_by(m)) & graph.modules for m in graph.modules}
    assert _cycles(adjacency) == []


def _core_modules() -> list[str]:
    import explorer.core

    return ["explorer.core"] + [m.name for m in pkgutil.walk_packages(explorer.core.__path__, "explorer.core.")]


def test_core_imports_without_qt():
    modules = _core_modules()
    assert len(modules) > 30
    script = f"""
import importlib, importlib.abc, sys
class NoQt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph', 'superqt', 'PyQt5', 'PyQt6'):
            raise ImportError('Qt is not available in this test: ' + name)
        return None
sys.meta_path.insert(0, NoQt())
for name in {modules!r}:
    importlib.import_module(name)
leaked = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph', 'superqt')]
assert not leaked, leaked
print('ok', len({modules!r}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=str(Path(explorer.__file__).resolve().parents[1]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"ok {len(modules)}"


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    done = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def picture_paths(text: str) -> list[str]:
    """The paths ARCHITECTURE.md's picture names: the code block under "## The picture", a tree indented two
    spaces a level, each line a name (or names, comma-separated) then two or more spaces and what it is."""
    block = re.search(r"^## The picture\n.*?^```\n(.*?)^```", text, re.S | re.M).group(1)
    parents: list[str] = []
    paths = []
    for line in block.splitlines():
        if not line.strip():
            continue
        level = (len(line) - len(line.lstrip(" "))) // 2
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        parent = "".join(parents[:level])
        for name in names.split(", "):
            paths.append(parent + name)
        last = names.split(", ")[-1]
        parents[level:] = [last if last.endswith("/") else ""]
    return paths


def test_picture_parser_reads_a_tree():
    block = "## The picture\n\n```\na/  x\n  b.py, c.py  y\n  d/  z\n    e.py  w\nf/, g/  v\n```\n"
    assert picture_paths(block) == ["a/", "a/b.py", "a/c.py", "a/d/", "a/d/e.py", "f/", "g/"]


def test_architecture_picture_names_every_package_and_only_real_paths():
    paths = picture_paths((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"ARCHITECTURE.md's picture names paths that do not exist: {missing}"
    named = {p.rstrip("/") for p in paths}
    packages = sorted(str(d.relative_to(ROOT)) for d in (ROOT / "explorer").rglob("__init__.py")
                      for d in [d.parent] if "_bundled" not in d.parts)
    unnamed = [p for p in packages if p not in named]
    assert not unnamed, f"packages ARCHITECTURE.md's picture does not name: {unnamed}"


def _sources_containing(needles: tuple[str, ...], except_for: tuple[str, ...] = (), under: str = "explorer") -> list[str]:
    found = []
    for path in sorted((ROOT / under).rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in except_for:
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{name}: {needle}" for needle in needles if needle in text]
    return found


def test_one_door_for_background_work():
    """Every worker starts through explorer/ui/session/background.py (``background.run``): no other
    superqt worker anywhere, and in the window no thread made by hand, no hand-kept "newest request" counter.
    (The core may run its own plain threads inside one computation: a corpus run writes a batch's results
    on one while the next batch computes.)"""
    door = ("explorer/ui/session/background.py",)
    assert _sources_containing(("create_worker(",), except_for=door) == []
    assert _sources_containing(("threading.Thread(", "QThread(", "self._latest", "_gen_id"), except_for=door,
                               under="explorer/ui") == []


def test_the_trace_on_screen_has_one_owner():
    """The presenter alone prepares and draws the panels: nothing plants callables in the Session, recovers
    a panel from a partial, or flags a timeline request."""
    assert _sources_containing(("session.preparers =", "session.prompt_for =", "func.__self__", "_timeline=")) == []
