"""The installed Qt binding must not leak references to None (PySide6 6.12.0 does, on Python < 3.12,
and the app then aborts with "none_dealloc" after minutes of use; pyproject.toml excludes it)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication([])
w = QWidget()
before = sys.getrefcount(None)
for _ in range(20000):
    w.resize(100, 100)
    w.setWindowTitle("x")
print(before - sys.getrefcount(None))
"""


def test_void_qt_calls_do_not_release_none():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                         env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""})
    assert out.returncode == 0, out.stderr[-500:]
    assert abs(int(out.stdout.strip())) < 1000
