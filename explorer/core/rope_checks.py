"""Checking a RoPE scaling's fields before any frequency is computed (issue 26): each problem one clean
line, instead of an error mid-forward (a negative or 1e308 ``beta_fast``, a string ``mscale``, a LongRoPE
factor list of the wrong length that would fail only past the original context). Qt- and torch-free, and
imports nothing of the explorer: ``ModelConfig``'s validation calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_LIMIT = 1e6  # far above any real factor or beta (YaRN's beta_fast is 32; factors reach a few hundred)


def scaling_problems(scaling: Mapping[str, Any], rotary_dim: int) -> list[str]:
    """What is wrong with ``scaling``'s fields that ``inverse_frequencies`` reads, for a head rotating
    ``rotary_dim`` dimensions: numbers of the wrong type, not finite, out of range; LongRoPE factor
    lists of the wrong length (which would fail only past the original context)."""
    kind = scaling.get("rope_type", "default")
    problems = []

    def number(key: str, low: float = 0.0, optional: bool = True, allow_zero: bool = False) -> None:
        value = scaling.get(key)
        if value is None and optional:
            return
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and \
            (low <= value if allow_zero else low < value) and value <= _LIMIT
        if not ok:
            problems.append(f"RoPE scaling {kind!r}: {key} should be a number in ({low:g}, {_LIMIT:g}] "
                            f"(got {str(value)[:40]!r})")

    if kind in ("linear", "dynamic", "llama3"):
        number("factor", optional=False)
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            number(key, optional=False)
    if kind == "yarn":
        number("factor")
        for key in ("beta_fast", "beta_slow", "attention_factor"):
            number(key)
        for key in ("mscale", "mscale_all_dim"):
            number(key, allow_zero=True)
        if not isinstance(scaling.get("truncate", True), bool):
            problems.append(f"RoPE scaling 'yarn': truncate should be true or false (got {scaling['truncate']!r:.40})")
    if kind == "proportional":
        number("factor")
        value = scaling.get("proportion")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            problems.append(f"RoPE scaling 'proportional': proportion should be a number in [0, 1] (got {value!r:.40})")
    if kind == "longrope":
        number("factor")
        number("attention_factor")
        for key in ("short_factor", "long_factor"):
            factors = scaling.get(key)
            if isinstance(factors, (list, tuple)) and len(factors) != rotary_dim // 2:
                problems.append(f"RoPE scaling 'longrope': {key} has {len(factors)} factors, one per rotated "
                                f"pair needs {rotary_dim // 2}")
    for key in ("original_max_position_embeddings", "max_position_embeddings"):
        value = scaling.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 24):
            problems.append(f"RoPE scaling {kind!r}: {key} should be a positive whole number (got {str(value)[:40]!r})")
    return problems
