"""Print a pip constraints file that pins every runtime dependency to the lowest version
pyproject.toml allows (its ``>=`` floor), for the CI step that tests the floors.

pip has no "lowest" resolution mode, so the floors are given as ``==`` constraints; the packages
they pull in resolve as usual. torch is the exception, given on the command line: these machines
install exactly one CPU build offline (2.13.0), so the floor of torch (2.3) is declared but tested
only where that wheel can be had.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

SKIP = {"torch"}

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text("utf-8"))["project"]
for requirement in project["dependencies"]:
    match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(?:\[.*?\])?\s*(.*)$", requirement)
    name, spec = match.group(1), match.group(2)
    floor = re.search(r">=\s*([0-9][^,;\s]*)", spec)
    if name.lower() in SKIP:
        continue
    if floor is None:
        sys.exit(f"{name} has no >= floor in pyproject.toml")
    print(f"{name}=={floor.group(1)}")
