"""Ollama's store (manifests + blobs) and LM Studio's models folder, faked on disk: models open by name."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_reference import build  # noqa: E402
from gguf_files import write_model  # noqa: E402

from explorer.core.checkpoint import load_checkpoint  # noqa: E402
from explorer.core.checkpoint.local_stores import (list_lmstudio, list_ollama, ollama_parts,  # noqa: E402
                                                   resolve_ollama)
from explorer.core.errors import CheckpointError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    return write_model(build("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2), path, "qwen2", "Q8_0").read_bytes()


def add_ollama_model(root: Path, name_parts: tuple[str, ...], data: bytes, digest: str | None = None) -> Path:
    """A manifest as ``ollama pull`` writes it: config, model, template and params layers; content under blobs/."""
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(data).hexdigest()
    (root / "blobs" / f"sha256-{sha}").write_bytes(data)
    template = b"{{ .Prompt }}"
    (root / "blobs" / f"sha256-{hashlib.sha256(template).hexdigest()}").write_bytes(template)
    manifest = root / "manifests" / Path(*name_parts)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64,
                   "size": 10},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": digest or f"sha256:{sha}",
                    "size": len(data)},
                   {"mediaType": "application/vnd.ollama.image.template",
                    "digest": f"sha256:{hashlib.sha256(template).hexdigest()}", "size": len(template)}]}))
    return manifest


def test_ollama_names():
    assert ollama_parts("llama3.2:1b") == ("registry.ollama.ai", "library", "llama3.2", "1b")
    assert ollama_parts("llama3.2") == ("registry.ollama.ai", "library", "llama3.2", "latest")
    assert ollama_parts("me/tiny:q8") == ("registry.ollama.ai", "me", "tiny", "q8")
    assert ollama_parts("hf.co/org/model:Q4_K_M") == ("hf.co", "org", "model", "Q4_K_M")
    for bad in ("../x:1", "a/b/c/d:1", "x:", "x:y:z", "", "a\\b:1", "x:../y"):
        assert ollama_parts(bad) is None, bad


def test_a_fake_ollama_store_opens_by_model_name(tmp_path, monkeypatch, gguf_bytes):
    root = tmp_path / "ollama"
    add_ollama_model(root, ("registry.ollama.ai", "library", "tiny-qwen", "q8"), gguf_bytes)
    add_ollama_model(root, ("registry.ollama.ai", "me", "other", "latest"), gguf_bytes)
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    listed = list_ollama()
    assert [m.name for m in listed] == ["me/other:latest", "tiny-qwen:q8"]
    assert all(m.store == "Ollama" and m.size_bytes == len(gguf_bytes) for m in listed)
    loaded = load_checkpoint("tiny-qwen:q8", device="cpu")
    assert loaded.name == "tiny-qwen:q8" and loaded.arch == "qwen2" and "sha256-" in loaded.source
    assert load_checkpoint("me/other", device="cpu").name == "me/other:latest"
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint("tiny-qwen:q4", device="cpu")


def test_the_command_line_opens_an_ollama_name(tmp_path, gguf_bytes):
    root = tmp_path / "ollama"
    add_ollama_model(root, ("registry.ollama.ai", "library", "tiny-qwen", "q8"), gguf_bytes)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OLLAMA_MODELS": str(root)}
    out = subprocess.run([sys.executable, "-m", "explorer", "info", "--checkpoint", "tiny-qwen:q8", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert "tiny-qwen:q8" in out.stdout and "Q8_0" in out.stdout and "dequantised" in out.stdout


def test_a_hostile_manifest_is_one_clear_line(tmp_path, gguf_bytes):
    root = tmp_path / "ollama"
    manifest = add_ollama_model(root, ("registry.ollama.ai", "library", "evil", "latest"), gguf_bytes,
                                digest="sha256:../../../../etc/passwd")
    with pytest.raises(CheckpointError, match="is not sha256"):
        resolve_ollama("evil", root)
    manifest.write_text("[1, 2")
    with pytest.raises(CheckpointError, match="not JSON"):
        resolve_ollama("evil", root)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": "sha256:" + "a" * 64}]}))
    with pytest.raises(CheckpointError, match="missing from"):
        resolve_ollama("evil", root)
    assert list_ollama(root) == []  # a broken manifest is not listed


def test_lm_studio_models_are_listed_and_open(tmp_path, monkeypatch, gguf_bytes):
    root = tmp_path / "lmstudio"
    (root / "Qwen" / "Tiny-GGUF").mkdir(parents=True)
    (root / "Qwen" / "Tiny-GGUF" / "tiny-q8_0.gguf").write_bytes(gguf_bytes)
    (root / "Qwen" / "Tiny-GGUF" / "mmproj-tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("LMSTUDIO_MODELS", str(root))
    assert [(m.name, m.store) for m in list_lmstudio()] == [("Qwen/Tiny-GGUF/tiny-q8_0.gguf", "LM Studio")]
    loaded = load_checkpoint("Qwen/Tiny-GGUF/tiny-q8_0.gguf", device="cpu")
    assert loaded.name == "Qwen/Tiny-GGUF/tiny-q8_0.gguf" and loaded.arch == "qwen2"


def test_a_folder_of_gguf_files_opens_its_only_one_or_names_them(tmp_path, gguf_bytes):
    folder = tmp_path / "Tiny-GGUF"
    folder.mkdir()
    (folder / "tiny-q8_0.gguf").write_bytes(gguf_bytes)
    (folder / "mmproj-tiny-f16.gguf").write_bytes(b"GGUF")
    assert load_checkpoint(folder, device="cpu").arch == "qwen2"
    (folder / "tiny-q4_0.gguf").write_bytes(gguf_bytes)
    with pytest.raises(CheckpointError, match="holds 2 GGUF files; open one of them: tiny-q4_0.gguf, tiny-q8_0.gguf"):
        load_checkpoint(folder, device="cpu")
