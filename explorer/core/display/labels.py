"""Labels for rows and columns of what the panels and exports show."""

from __future__ import annotations

from collections.abc import Sequence


def token_labels(tokens: Sequence[str]) -> list[str]:
    """``position:token`` labels, unique even when a token repeats."""
    return [f"{i}:{t}" for i, t in enumerate(tokens)]
