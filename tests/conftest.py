"""Shared fixtures. GUI tests run offscreen; torch uses two threads like the CI machine."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")
# the machine's own Ollama and LM Studio models never appear in a test (tests that need a store set one)
os.environ["OLLAMA_MODELS"] = os.path.join(os.sep, "nonexistent", "ollama-models")
os.environ["LMSTUDIO_MODELS"] = os.path.join(os.sep, "nonexistent", "lmstudio-models")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory):
    """A small random ``transformers`` GPT-2 saved with ``save_pretrained`` (GPT-2's full vocabulary)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=64, n_layer=3, n_head=4, n_positions=128, vocab_size=50257,
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir):
    """(our loaded model, the reference ``transformers`` model) on the same weights."""
    from transformers import GPT2LMHeadModel

    from explorer.core.checkpoint import load_checkpoint

    reference = GPT2LMHeadModel.from_pretrained(tiny_gpt2_dir, attn_implementation="eager").eval()
    return load_checkpoint(tiny_gpt2_dir, device="cpu"), reference


@pytest.fixture(scope="session")
def hub_repo_files(tiny_gpt2_dir):
    """A tiny GPT-2 repository's files as the Hub holds them (tests/fake_hub.py)."""
    from fake_hub import gpt2_repo_files

    return gpt2_repo_files(tiny_gpt2_dir)


@pytest.fixture()
def fake_hub(monkeypatch, tmp_path, hub_repo_files):
    """A local Hub on 127.0.0.1 holding ``fake_hub.REPO``; HF_ENDPOINT points at it, the cache is in tmp_path."""
    from fake_hub import REPO, FakeHub

    server = FakeHub()
    server.add(REPO, hub_repo_files)
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token of the machine's user
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()
