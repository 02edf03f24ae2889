"""A download's failures as one line each, saying what to do (``explain``)."""

from __future__ import annotations

import errno

from explorer.core.cancel import Cancelled
from explorer.core.errors import ExplorerError
from explorer.core.text import shown

TOKENS_PAGE = "https://huggingface.co/settings/tokens"


class DownloadError(ExplorerError):
    """A model cannot be fetched from the Hub: one line for the user; what was fetched stays in the cache."""


class DownloadCancelled(DownloadError, Cancelled):
    """The user stopped a download; the partial file stays in the cache and the next try resumes it."""


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def explain(exc: BaseException, repo_id: str, revision: str | None = None, file: str | None = None) -> ExplorerError:
    """The one line for a failure of huggingface_hub, the network or the disk (an ExplorerError to raise)."""
    from huggingface_hub import errors as hub

    if isinstance(exc, ExplorerError):
        return exc
    where = f"{repo_id}" + (f" at {shown(revision, 60)}" if revision and revision != "main" else "")
    kept = "what was fetched is kept and the next try resumes it"
    if isinstance(exc, hub.GatedRepoError):
        return DownloadError(f"{repo_id} is gated: accept its licence on https://huggingface.co/{repo_id} with your "
                             f"account, then give a token with read access ({TOKENS_PAGE})")
    if isinstance(exc, hub.RepositoryNotFoundError):
        return DownloadError(f"no repository {repo_id} on the Hub (or it is private: give a token that can read it)")
    if isinstance(exc, hub.RevisionNotFoundError):
        return DownloadError(f"{repo_id} has no revision {shown(revision or '', 60)}")
    if isinstance(exc, (hub.EntryNotFoundError, getattr(hub, "RemoteEntryNotFoundError", hub.EntryNotFoundError))):
        return DownloadError(f"{where} has no file {shown(file or '', 120)}")
    if isinstance(exc, hub.OfflineModeIsEnabled):
        return DownloadError("HF_HUB_OFFLINE is set, so nothing can be downloaded: unset it to get a model")
    status = _status(exc)
    if status == 401:
        return DownloadError(f"the Hub did not accept the token (401) for {repo_id}: create a read token at "
                             f"{TOKENS_PAGE} and give it")
    if status == 403:
        return DownloadError(f"the Hub refused access to {repo_id} (403): accept its licence on its page, and use a "
                             "token that has access to it")
    if status == 404:
        return DownloadError(f"{where}: not found on the Hub (404)" + (f" ({shown(file, 120)})" if file else ""))
    if status == 429:
        return DownloadError(f"the Hub asks to slow down (429): try again in a minute; {kept}")
    if status is not None and status >= 500:
        return DownloadError(f"the Hub answered with an error ({status}): try again later; {kept}")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return DownloadError(f"the disk is full while fetching {repo_id}: free some space; {kept}")
    if isinstance(exc, OSError) and not _is_network(exc):
        return DownloadError(f"cannot write the Hugging Face cache ({shown(str(exc.strerror or exc), 120)}): "
                             f"check the folder's permissions; {kept}")
    if _is_network(exc):
        return DownloadError(f"cannot reach the Hub ({type(exc).__name__}): check the connection; {kept}")
    if status is not None:
        return DownloadError(f"the Hub answered {status} for {where}; {kept}")
    return DownloadError(f"the download of {repo_id} failed: {type(exc).__name__}: {shown(str(exc), 160)}")


def _is_network(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConnectError", "TimeoutException", "RemoteProtocolError", "NetworkError", "ReadError",
                         "ConnectionError", "TransportError", "ProtocolError", "ReadTimeout", "ConnectTimeout"})
