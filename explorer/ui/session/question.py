"""A question about one attention cell of the trace on screen, asked from a right-click or the tour and
answered by the panel it names (``Session.ask``).

``Question("qk", layer, head, query, key)``: why head ``layer``.``head`` attends from ``query`` to ``key``
(the score split into query part x key part terms, ``core/analysis/qk.py``); ``Question("ov", layer, head,
query)``: what that head moves to ``query`` (its output split by source position and its OV circuit,
``core/analysis/ov.py``). Both are answered by the panel "qkov" (``ui/panels/qkov.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.display.tokens import quoted

KINDS = ("qk", "ov")


@dataclass(frozen=True)
class Question:
    kind: str                 # "qk": why the head attends at (query, key); "ov": what it moves to query
    layer: int
    head: int
    query: int
    key: int | None = None    # the key of a "qk" question

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if self.kind == "qk" and self.key is None:
            raise ValueError("a 'qk' question names its key")

    @property
    def panel(self) -> str:
        """The id of the panel that answers it (``ui/panels/registry.py``)."""
        return "qkov"

    def as_kind(self, kind: str, key: int | None = None) -> Question:
        """The same cell asked the other way ("qk" keeps this key, or ``key``)."""
        return Question(kind, self.layer, self.head, self.query, key if key is not None else self.key)

    def words(self, tokens: tuple[str, ...] | list[str] | None = None) -> str:
        """"why head 1.2 attends from #15 '·his' to #5 '·crown'" (tokens: the trace's, for the quoted texts)."""
        def at(p: int) -> str:
            return f"#{p} {quoted(tokens[p])}" if tokens is not None and 0 <= p < len(tokens) else f"#{p}"

        if self.kind == "qk":
            return f"why head {self.layer}.{self.head} attends from {at(self.query)} to {at(self.key)}"
        return f"what head {self.layer}.{self.head} moves to {at(self.query)}"
