"""Checkpoints in a Hugging Face cache (a fake cache tree built in tmp_path), resolved offline."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from explorer.core.checkpoint import load_checkpoint
from explorer.core.checkpoint.hub_cache import cache_dir, list_cached, resolve
from explorer.core.errors import CheckpointError

transformers = pytest.importorskip("transformers")
HASH_A, HASH_B = "a" * 40, "b" * 40


def tiny_model(path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.save(str(path / "tokenizer.json"))  # in the cache it becomes a link into blobs/

    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=32)
    transformers.GPTNeoXForCausalLM(config).save_pretrained(path)


def cached_repo(root: Path, repo_id: str, source: Path, snapshots=(HASH_A,), ref: str | None = HASH_A) -> Path:
    """The layout huggingface_hub writes: blobs/, snapshots/<hash>/<file> -> ../../blobs/<id>, refs/main."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    for i, commit in enumerate(snapshots):
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True)
        for f in source.iterdir():
            blob = repo / "blobs" / f"{i}-{f.name}"
            shutil.copy(f, blob)
            os.symlink(os.path.relpath(blob, snap), snap / f.name)
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(ref)
    return repo


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("weights")
    tiny_model(path)
    return path


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    for key in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    assert cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert cache_dir() == tmp_path / "hub"


def test_repo_id_folder_and_snapshot_resolve_to_the_refs_main_snapshot(monkeypatch, tmp_path, weights, no_network):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = cached_repo(tmp_path, "EleutherAI/pythia-tiny", weights, snapshots=(HASH_A, HASH_B), ref=HASH_B)
    for source in ("EleutherAI/pythia-tiny", repo, repo / "snapshots" / HASH_B):
        found = resolve(source)
        assert found is not None and found.name == "EleutherAI/pythia-tiny"
        assert found.path == repo / "snapshots" / HASH_B
    inside = resolve(repo / "snapshots" / HASH_A / "config.json")
    assert inside.path == repo / "snapshots" / HASH_A / "config.json" and inside.name == "EleutherAI/pythia-tiny"
    assert resolve(weights) is None and resolve("shakespeare") is None


def test_without_refs_main_the_newest_snapshot_with_a_config(tmp_path, weights):
    repo = cached_repo(tmp_path, "org/model", weights, snapshots=(HASH_A, HASH_B), ref=None)
    os.utime(repo / "snapshots" / HASH_A, (time.time() + 60, time.time() + 60))
    assert resolve(repo).path == repo / "snapshots" / HASH_A
    (repo / "snapshots" / HASH_A / "config.json").unlink()
    assert resolve(repo).path == repo / "snapshots" / HASH_B


def test_a_repo_id_that_is_not_cached_is_one_clear_line(monkeypatch, tmp_path, no_network):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache .* nothing is downloaded"):
        load_checkpoint("meta-llama/Llama-3.2-1B")
    (tmp_path / "models--org--empty" / "snapshots").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="holds no snapshot"):
        load_checkpoint("org/empty")


def test_load_by_repo_id_is_named_org_name(monkeypatch, tmp_path, weights, no_network):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cached_repo(tmp_path, "EleutherAI/pythia-tiny", weights)
    by_id = load_checkpoint("EleutherAI/pythia-tiny", device="cpu")
    direct = load_checkpoint(weights, device="cpu")
    assert by_id.name == by_id.repo_id == "EleutherAI/pythia-tiny" and by_id.source.endswith(HASH_A)
    assert direct.repo_id is None
    ids = [1, 5, 9, 2]
    assert np.array_equal(by_id.trace_ids(ids)["logits"], direct.trace_ids(ids)["logits"])
    assert by_id.notes == [] and by_id.tokenizer.encode("hello world") == [1, 2]
    assert by_id.tokenizer.name == "EleutherAI/pythia-tiny tokenizer"
    assert by_id.trace_ids(ids).tokens == ("hello", "[5]", "[9]", "world")  # rows no text maps to: their ids


def test_list_cached(tmp_path, weights):
    cached_repo(tmp_path, "b-org/second", weights)
    cached_repo(tmp_path, "a-org/first", weights)
    (tmp_path / "datasets--x--y").mkdir()
    (tmp_path / "models--broken--repo").mkdir()
    found = list_cached(tmp_path)
    assert [m.repo_id for m in found] == ["a-org/first", "b-org/second"]
    assert all(m.has_config and m.size_bytes > 1000 and m.path.name == HASH_A for m in found)
    assert list_cached(tmp_path / "missing") == []
