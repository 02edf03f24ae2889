"""Errors whose message is written for the user: the CLI and the app show ``str(error)`` as it is."""

from __future__ import annotations


class ExplorerError(Exception):
    """Base class: anything the user can fix or should be told about, with a one-line reason."""


class CheckpointError(ExplorerError):
    """A checkpoint is missing, unreadable, foreign, unsafe or inconsistent."""


class TokenizerError(ExplorerError):
    """A tokenizer description cannot be read or a text cannot be encoded."""


class PromptError(ExplorerError):
    """A prompt cannot be run (empty, say)."""
