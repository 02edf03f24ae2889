"""The memory budget in the window: the command line's flag, the remembered setting, the status-bar line,
View ▸ Memory budget…; a value the budget cannot keep is recomputed, never refused."""

from __future__ import annotations

import pytest

from explorer.core.budget import default_limit, global_budget
from explorer.ui.app import parse_args
from explorer.ui.window.budget_setting import BUDGET_KEY, apply_stored_budget, set_memory_budget


@pytest.fixture(autouse=True)
def _restore_budget():
    budget = global_budget()
    limit, explicit = budget.limit, budget.explicit
    yield
    budget.set_limit(limit, explicit)


def test_the_flag_reads_sizes_and_refuses_in_one_line(capsys):
    assert parse_args(["--memory-budget", "2GB"]).memory_budget == 2 * 2**30
    assert parse_args([]).memory_budget is None
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--memory-budget", "lots"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--memory-budget" in error and "a memory size like 512MB or 2GB" in error


def test_the_flag_is_remembered_and_the_setting_applied(settings):
    apply_stored_budget(settings, 300 * 2**20)
    assert global_budget().limit == 300 * 2**20 and settings.value(BUDGET_KEY) == str(300 * 2**20)
    global_budget().set_limit(default_limit(), explicit=False)
    apply_stored_budget(settings, None)  # the next start, without the flag
    assert global_budget().limit == 300 * 2**20 and global_budget().explicit
    settings.setValue(BUDGET_KEY, "garbage")
    apply_stored_budget(settings, None)  # a hand-edited value is dropped, the limit stays
    assert settings.value(BUDGET_KEY) is None and global_budget().limit == 300 * 2**20


def test_setting_the_budget_and_the_status_line(qtbot, window, settings):
    line = window.status.fields["memory"].text()
    assert line.startswith("memory ") and " of " in line
    assert "computed in float32" in window.status.fields["dtype"].toolTip()
    assert set_memory_budget("64MB", settings).startswith("memory ")
    view = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    assert any(a.text() == "&Memory budget…" for a in view.actions())
    assert global_budget().limit == 64 * 2**20 and settings.value(BUDGET_KEY) == str(64 * 2**20)
    assert set_memory_budget("twelve", settings).startswith("Memory budget unchanged: a memory size like")
    assert global_budget().limit == 64 * 2**20
    default = set_memory_budget("", settings)
    assert global_budget().limit == default_limit("cpu") and not global_budget().explicit
    assert settings.value(BUDGET_KEY) is None and default.startswith("memory ")
    # a budget far below the trace: the panels still get every value (recomputed), the line says so
    set_memory_budget("1KB", settings)
    window.layer_head.step_head(1)
    trace = window.trace
    assert trace.head(0, 1).shape == (trace.n_tokens, trace.n_tokens)
    assert global_budget().cached == 0 and "of 1.0 KB" in global_budget().describe()
