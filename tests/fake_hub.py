"""A local stand-in for the Hugging Face Hub: answers the metadata and file requests huggingface_hub makes
(``/api/models/<id>/revision/<rev>``, HEAD and GET ``/<id>/resolve/<rev>/<file>`` with ``Range``) for tiny
repositories held in memory, on 127.0.0.1 only. Faults on request: a token it wants, a connection dropped
after some bytes, a slow body (so a process can be killed mid-file). Every request is logged."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
REPO = "tiny-org/tiny-gpt2"


def gpt2_repo_files(model_dir) -> dict[str, bytes]:
    """A tiny GPT-2 repository: config, safetensors weights, GPT-2's tokenizer files; and what is never fetched
    (code, a pickle, a README)."""
    from gpt2_files import gpt2_vocab_and_merges

    files = {name: (model_dir / name).read_bytes() for name in ("config.json", "model.safetensors",
                                                                 "generation_config.json")}
    encoder, merges = gpt2_vocab_and_merges()
    files["vocab.json"] = json.dumps(encoder).encode()
    files["merges.txt"] = ("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)).encode()
    files["modeling_evil.py"] = b"import os; os.system('echo pwned')\n"
    files["pytorch_model.bin"] = b"\x80\x02 a pickle that must never be fetched"
    files["README.md"] = b"# tiny\n"
    return files


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str
    token: str | None = None  # a token it asks for (401 without it)
    gated: bool = False  # without the token: 401 GatedRepo instead of RepoNotFound


@dataclass
class Fault:
    drop_after: int | None = None  # close the connection after this many body bytes
    times: int = 1  # how many GETs of the file are cut
    bytes_per_second: float | None = None  # send the body slowly


@dataclass
class Logged:
    method: str
    path: str
    range: str | None


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    faults: dict[tuple[str, str], Fault] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)

    def add(self, repo_id: str, files: dict[str, bytes], token: str | None = None, gated: bool = False) -> Repo:
        commit = hashlib.sha1(repr(sorted((k, hashlib.sha1(v).hexdigest()) for k, v in files.items())).encode()
                              ).hexdigest()
        self.repos[repo_id] = Repo(dict(files), commit, token, gated)
        return self.repos[repo_id]

    def fetched(self, name: str) -> list[Logged]:
        """The GET requests of file ``name`` (any repository)."""
        return [r for r in self.log if r.method == "GET" and r.path.endswith("/" + name) and "/resolve/" in r.path]

    def start(self) -> None:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                hub._serve(self, body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub._serve(self, body=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def blob_id(name: str, data: bytes) -> str:
        if name.endswith(LFS_SUFFIXES):
            return hashlib.sha256(data).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def _info(self, repo_id: str, repo: Repo) -> dict:
        siblings = []
        for name, data in repo.files.items():
            entry = {"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
            if name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            else:
                entry["blobId"] = self.blob_id(name, data)
            siblings.append(entry)
        return {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False, "siblings": siblings,
                "tags": [], "downloads": 0, "likes": 0}

    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.log.append(Logged(h.command, path, h.headers.get("Range")))
        api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path)
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        repo_id = (api or resolve).group(1) if (api or resolve) else None
        repo = self.repos.get(repo_id or "")
        if repo is None:
            return self._error(h, 404, "RepoNotFound", body)
        if repo.token is not None and h.headers.get("Authorization") != f"Bearer {repo.token}":
            if h.headers.get("Authorization"):
                return self._error(h, 401, None, body, "Invalid credentials in Authorization header")
            return self._error(h, 401, "GatedRepo" if repo.gated else "RepoNotFound", body)
        if api:
            revision = api.group(2) or "main"
            if revision not in ("main", repo.commit):
                return self._error(h, 404, "RevisionNotFound", body)
            return self._send(h, 200, json.dumps(self._info(repo_id, repo)).encode(),
                              {"Content-Type": "application/json"}, body)
        revision, name = resolve.group(2), resolve.group(3)
        if revision not in ("main", repo.commit):
            return self._error(h, 404, "RevisionNotFound", body)
        if name not in repo.files:
            return self._error(h, 404, "EntryNotFound", body)
        data = repo.files[name]
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{self.blob_id(name, data)}"',
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        start = 0
        wanted = h.headers.get("Range")
        if wanted and body:
            start = int(re.match(r"bytes=(\d+)-", wanted).group(1))
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        fault = self.faults.get((repo_id, name)) if body else None
        if fault is not None and fault.times > 0 and fault.drop_after is not None:
            fault.times -= 1
            return self._send(h, 206 if start else 200, data[start:], headers, body, cut=fault.drop_after)
        slow = fault.bytes_per_second if fault is not None else None
        return self._send(h, 206 if start else 200, data[start:], headers, body, slow=slow)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str | None, body: bool,
               message: str = "error") -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, status, json.dumps({"error": message}).encode(), headers, body)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict, body: bool,
              cut: int | None = None, slow: float | None = None) -> None:
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if not body:
            return
        try:
            if cut is not None:
                h.wfile.write(data[:cut])
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(2)
                return
            if slow:
                step = max(int(slow / 20), 1)
                for i in range(0, len(data), step):
                    h.wfile.write(data[i:i + step])
                    h.wfile.flush()
                    time.sleep(step / slow)
                return
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True
