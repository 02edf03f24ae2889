"""Transformer Explorer: ``explorer.core`` is the engine (no Qt); ``explorer.show(...)`` opens the window."""

from __future__ import annotations

from typing import Any


def show(model_or_path: Any = None, tokenizer: Any = None, prompt: str | None = None, block: bool = True,
         **options: Any) -> Any:
    """Open the window on a checkpoint path, a built-in name, or an in-memory ``transformers`` model
    with its tokenizer (see ``explorer.ui.show``). Qt is imported only when this is called."""
    from explorer.ui.show import show as _show

    return _show(model_or_path, tokenizer, prompt, block, **options)
