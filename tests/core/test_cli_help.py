"""The command line as a new user meets it: --help describes the window mode, no display is one line
and status 2 (not a Qt abort), small probabilities are never printed as 0.0000."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explorer.cli import main
from explorer.commands.generate import probability
from explorer.ui.app import display_missing


def test_help_describes_the_window_and_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "without a command, the desktop window opens" in out
    for word in ("CHECKPOINT", "--device", "--dtype", "info", "export", "generate", "train"):
        assert word in out


def test_no_display_is_one_line_and_status_2():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-m", "explorer"], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs a display" in done.stderr
    assert "info|export|generate|train" in done.stderr


def test_display_missing_only_on_linux_without_a_display_or_headless_platform():
    assert display_missing({}, "linux")
    assert not display_missing({"DISPLAY": ":0"}, "linux")
    assert not display_missing({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not display_missing({"QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert display_missing({"QT_QPA_PLATFORM": "xcb"}, "linux")
    assert not display_missing({}, "darwin") and not display_missing({}, "win32")


@pytest.mark.parametrize(("p", "shown"), [(0.5, "0.5000"), (1e-4, "0.0001"), (3.2e-7, "3.20e-07"), (0.0, "0.0000"),
                                          (4.9e-5, "4.90e-05")])
def test_probabilities_never_print_as_zero_when_they_are_not(p, shown):
    assert probability(p) == shown
    assert p == 0 or float(probability(p)) > 0
