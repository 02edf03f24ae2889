"""One file's bytes into the Hugging Face cache, resumable across cancels, crashes and lost connections.

huggingface_hub (2.x) downloads each file to a temporary name unique to the call and deletes it when
the call fails, so a cancelled or crashed download starts again from byte 0; within one call it resumes
only after a network error. A model's weights are GBs on a laptop's connection, so the app brings the
blob itself, the way huggingface_hub 0.x did:

* the file's URL, ETag, size and redirect come from huggingface_hub (``hf_hub_url``,
  ``get_hf_file_metadata``), with its headers (token, user agent) and its HTTP session;
* the bytes go to ``blobs/<etag>.incomplete`` (the name huggingface_hub 0.x resumed from), under
  huggingface_hub's own lock file for that blob, appended from where it stopped (an HTTP ``Range``);
* a lost connection retries from there (five tries without progress); a cancel stops at the next chunk;
* the whole file is checked against its ETag (the sha256 of an LFS file, the git blob id of the others)
  before it is renamed to ``blobs/<etag>``: a damaged file is removed, never kept.

``hf_hub_download`` then finds the blob and only adds the snapshot's link to it (the cache's layout stays
huggingface_hub's).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from explorer.core.checkpoint.hub_cache import repo_folder_name
from explorer.core.download.errors import DownloadCancelled, DownloadError, explain

CHUNK = 1 << 20
TRIES_WITHOUT_PROGRESS = 5
_HEX = set("0123456789abcdef")


def fetch_blob(repo_id: str, name: str, commit: str, cache: Path, endpoint: str | None, token: str | None,
               on_bytes: Callable[[int], None], stopped: Callable[[], bool]) -> Path:
    """The blob of ``name`` at ``commit`` in the cache, fetched or resumed as needed (module doc)."""
    from filelock import FileLock
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token or None, endpoint=endpoint)
    except Exception as exc:  # noqa: BLE001 - one line for every Hub or network failure
        raise explain(exc, repo_id, commit, name) from None
    etag, size = meta.etag or "", meta.size
    if not etag or set(etag) - _HEX or len(etag) not in (40, 64) or not isinstance(size, int):
        raise DownloadError(f"the Hub gave no usable checksum or size for {repo_id}'s {name}; nothing was kept")
    folder = cache / repo_folder_name(repo_id)
    blob = folder / "blobs" / etag
    if blob.is_file():
        return blob
    blob.parent.mkdir(parents=True, exist_ok=True)
    locks = cache / ".locks" / repo_folder_name(repo_id)
    locks.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(etag + ".incomplete")
    with FileLock(str(locks / f"{etag}.lock")):
        if blob.is_file():  # another process finished it meanwhile
            return blob
        _transfer(meta.location or url, url, partial, size, token, on_bytes, stopped, repo_id, name)
        if _digest(partial, len(etag)) != etag:
            partial.unlink(missing_ok=True)
            raise DownloadError(f"{repo_id}'s {name} arrived damaged (its checksum differs); it was removed: "
                                "get the model again")
        os.replace(partial, blob)
    return blob


def _transfer(location: str, url: str, partial: Path, size: int, token: str | None,
              on_bytes: Callable[[int], None], stopped: Callable[[], bool], repo_id: str, name: str) -> None:
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(token=token or None)
    headers["Accept-Encoding"] = "identity"
    if urlparse(location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)
        headers.pop("Authorization", None)  # the token goes to the Hub only, never to a storage host
    failures = 0
    while True:
        have = partial.stat().st_size if partial.is_file() else 0
        if have > size:
            partial.unlink()
            have = 0
        if have == size:
            return
        if stopped():
            raise DownloadCancelled(f"the download of {repo_id} was cancelled; it resumes where it stopped")
        wanted = dict(headers, Range=f"bytes={have}-") if have else headers
        try:
            with get_session().stream("GET", location, headers=wanted, follow_redirects=True) as response:
                hf_raise_for_status(response)
                with partial.open("r+b" if have else "wb") as out:
                    if have and response.status_code == 200:  # the server ignored Range: start again
                        out.truncate(0)
                        on_bytes(-have)
                    else:
                        out.seek(have)
                    for chunk in response.iter_bytes():  # as they arrive: a cut keeps every byte received
                        if stopped():
                            raise DownloadCancelled(f"the download of {repo_id} was cancelled; it resumes where "
                                                    "it stopped")
                        out.write(chunk)
                        on_bytes(len(chunk))
                        failures = 0
        except DownloadError:
            raise
        except Exception as exc:  # noqa: BLE001 - a lost connection resumes; anything else is one line
            failures += 1
            network = explain(exc, repo_id, None, name)
            if failures >= TRIES_WITHOUT_PROGRESS or "cannot reach the Hub" not in str(network):
                raise network from None
            _pause(min(0.2 * 2 ** failures, 2.0), stopped)
            continue
        if partial.stat().st_size < size:  # the body ended early without an error: go on from there
            failures += 1
            if failures >= TRIES_WITHOUT_PROGRESS:
                raise DownloadError(f"the Hub kept ending {repo_id}'s {name} early; what arrived is kept and the "
                                    "next try resumes it")


def _pause(seconds: float, stopped: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stopped():
        time.sleep(0.05)


def _digest(path: Path, length: int) -> str:
    """The file's sha256 (an LFS ETag, 64 hex digits) or git blob id (40)."""
    h = hashlib.sha256() if length == 64 else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()
