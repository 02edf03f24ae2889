"""Errors whose message is written for the user: the CLI and the app show ``str(error)`` as it is."""

from __future__ import annotations


class Cancelled(Exception):
    """Raised inside a computation whose result is no longer wanted (not an error for the user); also
    importable from ``explorer.core.cancel``, beside ``Cancel``."""


class ExplorerError(Exception):
    """Base class: anything the user can fix or should be told about, with a one-line reason."""


class CheckpointError(ExplorerError):
    """A checkpoint is missing, unreadable, foreign, unsafe or inconsistent."""


class TokenizerError(ExplorerError):
    """A tokenizer description cannot be read or a text cannot be encoded."""


class PromptError(ExplorerError):
    """A prompt cannot be run (empty, say)."""


class LoadCancelled(ExplorerError, Cancelled):
    """Loading a checkpoint was stopped by the user (between two tensors); nothing was replaced.
    A ``Cancelled`` that carries a message for the user."""


class InternalError(ExplorerError):
    """A bug, not the user's input: shown as one line asking for a report; the traceback is its ``__cause__``."""

    @classmethod
    def wrap(cls, exc: BaseException, doing: str = "") -> InternalError:
        where = f" while {doing}" if doing else ""
        return cls(f"internal error{where}: {type(exc).__name__}: {str(exc)[:300]} (please report)")


class VerifyRefused(ExplorerError):
    """``verify``'s reference cannot read this checkpoint, or transformers is missing (one line, exit status 2)."""


class ExportError(ExplorerError):
    """An export cannot be written where asked (a folder that is not an earlier export, a user's file in the way)."""


class ArgumentError(ExplorerError, TypeError, ValueError):
    """An argument of the Python API (or a command-line value) of the wrong type or out of range; the message
    names the argument. Also a ``TypeError`` and a ``ValueError``, so code that caught those still does."""


class TraceKeyError(ExplorerError, KeyError):
    """A key that a trace neither holds nor can derive. Also a ``KeyError`` (a trace reads like a mapping)."""

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""
