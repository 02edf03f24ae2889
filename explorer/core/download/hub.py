"""Getting a model from the Hugging Face Hub, only when the user asks (File ▸ Get a model…, ``get``).

The files go into the user's Hugging Face cache, laid out by ``huggingface_hub``, so every other tool
sees them too; each file's bytes come through ``transfer.fetch_blob``, which resumes what a cancel, a
crash or a lost connection left. This module decides *what* to fetch and refuses early:

1. ``plan_download`` asks the Hub for the repository's file list (sizes included) at one commit, then
   fetches the small files that say what the model is (``config.json``, ``tokenizer_config.json``,
   the weights' index) and refuses, before any weight is fetched: a repository that needs remote
   code (``auto_map``), a model type this app does not open, one without safetensors weights, and a
   disk without room for what is still missing.
2. ``download`` fetches the plan's files at that commit (never code, never pickles), reporting bytes,
   speed and time left, and stops at the next chunk when cancelled; the branch's ref is written last,
   so the cache names the snapshot only once it is whole.

Every failure is one line (``DownloadError``) that says what to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.core.cancel import CancelLike, asker
from explorer.core.checkpoint.hub_cache import REPO_ID, cache_dir, repo_folder_name
from explorer.core.download.errors import DownloadError, explain
from explorer.core.download.transfer import fetch_blob
from explorer.core.text import shown

# What the app reads from a repository: config, safetensors weights, tokenizer files, chat template.
# Never code (*.py), never pickled weights (*.bin, *.pt, *.ckpt), never other formats' copies.
METADATA_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "vocab.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
_SHARD = re.compile(r"^[A-Za-z0-9._-]+\.safetensors$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
SMALL_FILE_LIMIT = 64 * 2**20  # a config, tokenizer or index file larger than this is not one
DISK_RESERVE = 200 * 2**20  # room left free on the disk after the download, for everything else


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int
    blob: str  # the name huggingface_hub gives its cache blob: the LFS sha256, else the git blob id


@dataclass(frozen=True)
class DownloadPlan:
    """What ``download`` will fetch: the files of ``repo_id`` at ``commit`` (the ``revision`` asked)."""

    repo_id: str
    revision: str
    commit: str
    files: tuple[RemoteFile, ...]
    cache: Path
    endpoint: str | None = None
    gguf: str | None = None
    model_type: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def missing_bytes(self) -> int:
        """Bytes still to fetch: files not in the cache, less what an interrupted download already holds."""
        blobs = self.cache / repo_folder_name(self.repo_id) / "blobs"
        missing = 0
        for f in self.files:
            if (blobs / f.blob).is_file():
                continue
            partial = blobs / f"{f.blob}.incomplete"
            missing += max(f.size - (partial.stat().st_size if partial.is_file() else 0), 0)
        return missing

    @property
    def snapshot(self) -> Path:
        """Where the files are once downloaded (the folder ``load_checkpoint`` opens)."""
        return self.cache / repo_folder_name(self.repo_id) / "snapshots" / self.commit

    @property
    def opens(self) -> Path:
        """What to open afterwards: the snapshot folder, or the GGUF file in it."""
        return self.snapshot / self.gguf if self.gguf else self.snapshot


@dataclass
class Progress:
    """Where a download stands, handed to the progress callback (at most ~10 times a second)."""

    done_bytes: int  # in the cache, of the plan's files (an earlier, interrupted download's bytes count)
    total_bytes: int
    file: str  # the file being fetched
    fetched_bytes: int = 0  # fetched by this run: the speed's numerator
    started: float = field(default_factory=time.monotonic)

    @property
    def bytes_per_second(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.fetched_bytes / elapsed if elapsed > 0 and self.fetched_bytes > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        if self.bytes_per_second <= 0:
            return None
        return max(self.total_bytes - self.done_bytes, 0) / self.bytes_per_second


ProgressFn = Callable[[Progress], None]


def check_names(repo_id: str, revision: str | None = None, gguf: str | None = None) -> None:
    """One line for a repository id, revision or GGUF file name that cannot be one."""
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id) or ".." in repo_id:
        raise DownloadError(f"{shown(str(repo_id), 80)} is not a repository id: give it as org/name "
                            "(for example HuggingFaceTB/SmolLM2-135M-Instruct)")
    if revision is not None and (not isinstance(revision, str) or not _REVISION.match(revision)
                                 or ".." in revision.split("/")):
        raise DownloadError(f"{shown(str(revision), 80)} is not a revision: a branch, a tag or a commit hash")
    if gguf is not None and (not isinstance(gguf, str) or not gguf.endswith(".gguf") or ".." in gguf.split("/")
                             or gguf.startswith("/")):
        raise DownloadError(f"{shown(str(gguf), 80)} is not a GGUF file name in the repository (it ends in .gguf)")


def _api(endpoint: str | None, token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token or None)


def plan_download(repo_id: str, revision: str | None = None, gguf: str | None = None, *, token: str | None = None,
                  endpoint: str | None = None, cache: Path | str | None = None,
                  check_disk: bool = True) -> DownloadPlan:
    """Ask the Hub what to fetch and refuse what cannot be opened, before any weight is fetched (module doc)."""
    check_names(repo_id, revision, gguf)
    revision = revision or "main"
    cache = Path(cache) if cache is not None else cache_dir()
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    try:
        info = _api(endpoint, token).model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - every Hub or network failure becomes one line
        raise explain(exc, repo_id, revision) from None
    commit = str(getattr(info, "sha", "") or "")
    if not _COMMIT.match(commit):
        raise DownloadError(f"the Hub gave no commit for {repo_id} at {revision}: nothing was downloaded")
    remote = {}
    for sibling in info.siblings or ():
        lfs = getattr(sibling, "lfs", None)
        blob = (getattr(lfs, "sha256", None) if lfs is not None else None) or getattr(sibling, "blob_id", None)
        size = getattr(sibling, "size", None)
        if isinstance(size, int) and size >= 0 and isinstance(blob, str) and re.fullmatch(r"[0-9a-f]{40,64}", blob):
            remote[sibling.rfilename] = RemoteFile(sibling.rfilename, size, blob)
    plan = DownloadPlan(repo_id, revision, commit, (), cache, endpoint, gguf)
    if gguf is not None:
        plan = _gguf_plan(plan, remote)
    else:
        plan = _folder_plan(plan, remote, token)
    if check_disk:
        check_room(plan)
    return plan


def _gguf_plan(plan: DownloadPlan, remote: dict[str, RemoteFile]) -> DownloadPlan:
    if plan.gguf not in remote:
        ggufs = sorted(name for name in remote if name.endswith(".gguf"))
        listed = ", ".join(ggufs[:8]) + (" …" if len(ggufs) > 8 else "")
        raise DownloadError(f"{plan.repo_id} has no file {shown(plan.gguf or '', 120)}"
                            + (f"; its GGUF files: {listed}" if ggufs else "; it holds no GGUF file"))
    return DownloadPlan(**{**plan.__dict__, "files": (remote[plan.gguf],)})


def _folder_plan(plan: DownloadPlan, remote: dict[str, RemoteFile], token: str | None) -> DownloadPlan:
    if "config.json" not in remote:
        ggufs = sorted(name for name in remote if name.endswith(".gguf"))
        hint = f": it holds GGUF files, give one with --gguf (e.g. {ggufs[0]})" if ggufs else ""
        raise DownloadError(f"{plan.repo_id} has no config.json, so it is not a transformers model{hint}")
    config = _small_json(plan, remote["config.json"], token)
    model_type = _check_config(plan.repo_id, config)
    if "tokenizer_config.json" in remote:
        tokenizer_config = _small_json(plan, remote["tokenizer_config.json"], token)
        if isinstance(tokenizer_config.get("auto_map"), (dict, list)):
            raise DownloadError(f"{plan.repo_id}'s tokenizer needs code from the repository (auto_map in "
                                "tokenizer_config.json); this app never runs a repository's code, so nothing was "
                                "downloaded")
    weights = _weight_files(plan, remote, token)
    wanted = [*METADATA_FILES, *TOKENIZER_FILES, *weights]
    files = tuple(remote[name] for name in dict.fromkeys(wanted) if name in remote)
    return DownloadPlan(**{**plan.__dict__, "files": files, "model_type": model_type})


def _check_config(repo_id: str, config: dict[str, Any]) -> str:
    from explorer.core.checkpoint.families import FAMILIES

    if isinstance(config.get("auto_map"), (dict, list)) or config.get("trust_remote_code"):
        raise DownloadError(f"{repo_id} needs code from the repository (auto_map in config.json); this app never "
                            "runs a repository's code, so nothing was downloaded")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise DownloadError(f"{repo_id} is a {shown(str(model_type), 60)!s} model, which this app does not open "
                            f"(it opens: {known}); nothing was downloaded")
    return model_type


def _weight_files(plan: DownloadPlan, remote: dict[str, RemoteFile], token: str | None) -> list[str]:
    if WEIGHTS_INDEX in remote:
        index = _small_json(plan, remote[WEIGHTS_INDEX], token)
        weight_map = index.get("weight_map")
        shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        bad = [s for s in shards if not isinstance(s, str) or not _SHARD.match(s) or s not in remote]
        if not shards or bad:
            raise DownloadError(f"{plan.repo_id}'s {WEIGHTS_INDEX} names shards the repository does not hold "
                                f"({shown(str(bad[:3]), 120)}); nothing was downloaded")
        return [WEIGHTS_INDEX, *shards]
    if WEIGHTS in remote:
        return [WEIGHTS]
    others = sorted(name for name in remote if name.endswith((".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5")))
    found = f" (it holds {', '.join(others[:4])})" if others else ""
    raise DownloadError(f"{plan.repo_id} has no safetensors weights{found}: only safetensors are fetched, because "
                        "other weight files can carry code" + ("; for a GGUF give its file name" if any(
                            o.endswith(".gguf") for o in others) else ""))


def _small_json(plan: DownloadPlan, file: RemoteFile, token: str | None) -> dict[str, Any]:
    """A small file of the plan, fetched into the cache (it is one of the files kept) and parsed."""
    if file.size > SMALL_FILE_LIMIT:
        raise DownloadError(f"{plan.repo_id}'s {file.name} is {file.size:,} bytes: too large to be one; "
                            "nothing was downloaded")
    path = _fetch(plan, file.name, token)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DownloadError(f"{plan.repo_id}'s {file.name} cannot be read as JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise DownloadError(f"{plan.repo_id}'s {file.name} is not a JSON object")
    return data


def check_room(plan: DownloadPlan) -> None:
    """Refuse a download the disk has no room for, before it starts (what an interrupted one holds counts)."""
    need = plan.missing_bytes()
    if need == 0:
        return
    where = plan.cache
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if free < need + DISK_RESERVE:
        raise DownloadError(f"not enough disk space for {plan.repo_id}: {need / 1e6:,.0f} MB to fetch, "
                            f"{free / 1e6:,.0f} MB free in {where} (and {DISK_RESERVE // 2**20} MB kept free); "
                            "nothing was downloaded")


def download(plan: DownloadPlan, progress: ProgressFn | None = None, cancel: CancelLike = None,
             token: str | None = None) -> Path:
    """Fetch the plan's files into the cache; the path to open (``plan.opens``). Stops with
    ``DownloadCancelled`` at the next chunk when cancelled; what was fetched is kept and the next call resumes
    it (``transfer.fetch_blob``)."""
    state = Progress(plan.total_bytes - plan.missing_bytes(), plan.total_bytes, "")
    stopped = asker(cancel)
    last = [0.0]

    def on_bytes(n: int) -> None:
        state.done_bytes += n
        state.fetched_bytes += n
        now = time.monotonic()
        if progress is not None and now - last[0] >= 0.1:
            last[0] = now
            progress(state)

    for f in plan.files:
        state.file = f.name
        fetch_blob(plan.repo_id, f.name, plan.commit, plan.cache, plan.endpoint, token, on_bytes, stopped)
        _fetch(plan, f.name, token)  # the blob is there: huggingface_hub links it into the snapshot
        state.done_bytes = plan.total_bytes - plan.missing_bytes()
        if progress is not None:
            progress(state)
    if not all((plan.snapshot / f.name).is_file() for f in plan.files):
        raise DownloadError(f"{plan.repo_id} changed on the Hub during the download; get it again")
    _write_ref(plan)
    return plan.opens


def _fetch(plan: DownloadPlan, name: str, token: str | None) -> str:
    from huggingface_hub import hf_hub_download

    try:
        return hf_hub_download(plan.repo_id, name, revision=plan.commit, cache_dir=plan.cache, token=token or None,
                               endpoint=plan.endpoint)
    except Exception as exc:  # noqa: BLE001 - every Hub, network or disk failure becomes one line
        raise explain(exc, plan.repo_id, plan.revision, name) from None


def _write_ref(plan: DownloadPlan) -> None:
    """refs/<revision> names the commit, as huggingface_hub writes it, so the cache opens it by repository id;
    written last, once every file is in the snapshot."""
    if _COMMIT.match(plan.revision):
        return
    ref = plan.cache / repo_folder_name(plan.repo_id) / "refs" / plan.revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    if not ref.is_file() or ref.read_text(encoding="ascii", errors="replace").strip() != plan.commit:
        ref.write_text(plan.commit, encoding="ascii")
