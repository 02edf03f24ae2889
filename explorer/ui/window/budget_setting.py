"""The memory budget in the window: from the command line or the settings, shown, and set from View ▸ Memory budget…

The budget itself (explorer/core/budget.py) bounds what traces keep: their stored arrays and the derived
values cached beside them (evicted and recomputed when it is short, never a reason to fail).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QInputDialog, QWidget

from explorer.core.budget import format_size, global_budget, parse_size

BUDGET_KEY = "memory/budget"


def apply_stored_budget(settings: Any, cli_value: int | None) -> None:
    """The command line's budget (remembered), else the one remembered, else the device's default."""
    budget = global_budget()
    if cli_value is not None:
        budget.set_limit(cli_value)
        settings.setValue(BUDGET_KEY, str(cli_value))
        return
    stored = str(settings.value(BUDGET_KEY, "") or "")
    if stored:
        try:
            budget.set_limit(parse_size(stored))
        except ValueError:  # a hand-edited settings file: forget it, keep the default
            settings.remove(BUDGET_KEY)


def ask_memory_budget(window: QWidget, settings: Any) -> str | None:
    """Ask for a new budget (e.g. 2GB; empty = the device's default); returns the status line, None if cancelled."""
    budget = global_budget()
    current = format_size(budget.limit).replace(" ", "") if budget.explicit else ""
    text, ok = QInputDialog.getText(window, "Memory budget",
                                    "Memory for traces and their cached views (e.g. 512MB, 4GB; empty: the "
                                    f"device's default).\nNow: {budget.describe()}", text=current)
    if not ok:
        return None
    return set_memory_budget(text, settings)


def set_memory_budget(text: str, settings: Any) -> str:
    """Apply ``text`` (a size, or empty for the default); the status line, or one line saying what was wrong."""
    budget = global_budget()
    if not text.strip():
        budget.explicit = False
        budget.follow_device(budget.device)
        settings.remove(BUDGET_KEY)
        return budget.describe()
    try:
        nbytes = parse_size(text)
    except ValueError as exc:
        return f"Memory budget unchanged: {exc}"
    budget.set_limit(nbytes)
    settings.setValue(BUDGET_KEY, str(nbytes))
    return budget.describe()
