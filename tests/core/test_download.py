"""Getting a model from the Hub (core/download): against a local server that answers huggingface_hub's
requests for tiny repositories (tests/fake_hub.py), with HF_ENDPOINT pointed at it and the Hugging Face
cache in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from explorer.core.cancel import Cancel
from explorer.core.download import DownloadCancelled, DownloadError, download, plan_download
from fake_hub import REPO, Fault


@pytest.fixture()
def hub(fake_hub):
    return fake_hub


@pytest.fixture(scope="module")
def repo_files(hub_repo_files):
    return hub_repo_files


def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


def test_a_whole_download_then_opens(hub, tmp_path, repo_files, tiny_gpt2_dir):
    from explorer.core.checkpoint import load_checkpoint

    plan = plan_download(REPO)
    assert {f.name for f in plan.files} == {"config.json", "generation_config.json", "model.safetensors",
                                            "vocab.json", "merges.txt"}  # never code, a pickle or the README
    assert plan.total_bytes == sum(len(repo_files[f.name]) for f in plan.files)
    seen = []
    path = download(plan, progress=lambda p: seen.append((p.done_bytes, p.total_bytes)))
    assert seen[-1] == (plan.total_bytes, plan.total_bytes)
    assert all(b <= a for (b, _), (a, _) in zip(seen, seen[1:]))  # bytes done only grow
    for f in plan.files:
        assert (path / f.name).read_bytes() == repo_files[f.name]
    assert not hub.fetched("modeling_evil.py") and not hub.fetched("pytorch_model.bin")

    ids = torch.tensor([[464, 3290, 318, 257]])
    got = load_checkpoint(REPO)  # by repository id, from the cache, offline
    want = load_checkpoint(tiny_gpt2_dir)
    assert got.tokenizer.encode(" The cat sat") == [383, 3797, 3332]
    torch.testing.assert_close(got.model(ids), want.model(ids), rtol=0, atol=0)

    # a second download has nothing to fetch and asks for no file again
    before = len(hub.fetched("model.safetensors"))
    download(plan_download(REPO))
    assert len(hub.fetched("model.safetensors")) == before


def test_cancel_then_resume_to_the_same_bytes(hub, tmp_path, repo_files):
    hub.faults[REPO, "model.safetensors"] = Fault(bytes_per_second=20_000_000)  # progress is reported meanwhile
    cancel = Cancel()

    def stop_midway(progress):
        if progress.file == "model.safetensors" and progress.done_bytes > progress.total_bytes // 2:
            cancel.set()

    plan = plan_download(REPO)
    with pytest.raises(DownloadCancelled, match="cancelled; it resumes"):
        download(plan, progress=stop_midway, cancel=cancel)
    held = plan.total_bytes - plan.missing_bytes()
    assert 0 < held < plan.total_bytes
    assert not (cache(tmp_path) / "models--tiny-org--tiny-gpt2" / "refs" / "main").exists()  # not named yet

    path = download(plan_download(REPO))
    resumed = [r.range for r in hub.fetched("model.safetensors") if r.range]
    assert resumed and int(resumed[-1].split("=")[1].rstrip("-")) > 0  # asked from where it stopped
    assert (path / "model.safetensors").read_bytes() == repo_files["model.safetensors"]


@pytest.mark.parametrize("cut", [1, 70_000, 4_000_000, 12_000_000])
def test_a_cut_connection_resumes_to_the_same_bytes(hub, repo_files, cut):
    """The connection drops twice at a byte of the weights: the download goes on from what arrived."""
    weights = repo_files["model.safetensors"]
    cut = min(cut, len(weights) - 1)
    hub.faults[REPO, "model.safetensors"] = Fault(drop_after=cut, times=2)
    path = download(plan_download(REPO))
    assert (path / "model.safetensors").read_bytes() == weights
    starts = [int(r.range.split("=")[1].rstrip("-")) for r in hub.fetched("model.safetensors") if r.range]
    assert starts and starts[0] == cut  # the second request asked from the byte where the first was cut


def test_a_killed_process_resumes(hub, tmp_path, repo_files):
    """A crash mid-file: the process is killed while the weights arrive; the next download resumes them."""
    hub.faults[REPO, "model.safetensors"] = Fault(bytes_per_second=2_000_000)
    script = textwrap.dedent(f"""
        from explorer.core.download import plan_download, download
        def report(p):
            if p.file == "model.safetensors" and p.done_bytes > p.total_bytes // 3:
                print("midway", flush=True)
        download(plan_download({REPO!r}), progress=report)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    assert child.stdout.readline().strip() == "midway"
    child.send_signal(signal.SIGKILL)
    child.wait()
    hub.faults.clear()

    plan = plan_download(REPO)
    assert 0 < plan.missing_bytes() < plan.total_bytes  # what arrived before the kill is still there
    path = download(plan)
    assert (path / "model.safetensors").read_bytes() == repo_files["model.safetensors"]


def test_remote_code_is_refused_before_any_weight(hub, repo_files):
    config = json.loads(repo_files["config.json"])
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    hub.add("evil/remote-code", {**repo_files, "config.json": json.dumps(config).encode()})
    with pytest.raises(DownloadError, match="needs code from the repository") as info:
        plan_download("evil/remote-code")
    assert "\n" not in str(info.value)
    assert not hub.fetched("model.safetensors") and not hub.fetched("modeling_evil.py")


def test_a_full_disk_is_refused_before_starting(hub, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=5_000_000))
    with pytest.raises(DownloadError, match="not enough disk space .* nothing was downloaded"):
        plan_download(REPO)
    assert not hub.fetched("model.safetensors")


def test_failures_are_one_line_and_leave_the_cache_consistent(hub, tmp_path, repo_files):
    hub.add("private/gated", repo_files, token="hf_right", gated=True)
    hub.add("private/model", repo_files, token="hf_right")
    cases = {
        ("no-such/model", None): "no repository no-such/model on the Hub",
        ("private/gated", None): "is gated: accept its licence",
        ("private/model", "hf_wrong"): "did not accept the token \\(401\\)",
        (REPO + "x", None): "no repository",
    }
    for (repo_id, token), message in cases.items():
        with pytest.raises(DownloadError, match=message) as info:
            plan_download(repo_id, token=token)
        assert "\n" not in str(info.value)
    assert download(plan_download("private/model", token="hf_right"), token="hf_right").is_dir()
    with pytest.raises(DownloadError, match="has no revision"):
        plan_download(REPO, revision="v9")
    with pytest.raises(DownloadError, match="not a repository id"):
        plan_download("../../etc")

    # the server goes away mid-download: one line; what arrived is whole or marked incomplete
    plan = plan_download(REPO)
    hub.faults[REPO, "model.safetensors"] = Fault(drop_after=1000, times=1)
    hub.stop()
    with pytest.raises(DownloadError, match="cannot reach the Hub") as info:
        download(plan)
    assert "\n" not in str(info.value)
    snapshot = plan.snapshot
    for entry in snapshot.iterdir() if snapshot.is_dir() else ():
        assert entry.read_bytes() == repo_files[entry.name]  # nothing half-written under its own name


def test_repositories_without_usable_weights_say_so(hub, repo_files):
    no_weights = {k: v for k, v in repo_files.items() if k != "model.safetensors"}
    hub.add("org/pickles-only", no_weights)
    with pytest.raises(DownloadError, match="no safetensors weights .*pytorch_model.bin"):
        plan_download("org/pickles-only")
    hub.add("org/gguf-only", {"model-Q4_0.gguf": b"GGUF" + bytes(60), "README.md": b"x"})
    with pytest.raises(DownloadError, match="give one with --gguf \\(e.g. model-Q4_0.gguf\\)"):
        plan_download("org/gguf-only")
    plan = plan_download("org/gguf-only", gguf="model-Q4_0.gguf")
    assert [f.name for f in plan.files] == ["model-Q4_0.gguf"]
    with pytest.raises(DownloadError, match="has no file nope.gguf; its GGUF files: model-Q4_0.gguf"):
        plan_download("org/gguf-only", gguf="nope.gguf")
    config = json.loads(repo_files["config.json"])
    hub.add("org/unknown-type", {**repo_files, "config.json": json.dumps({**config, "model_type": "xyz"}).encode()})
    with pytest.raises(DownloadError, match="is a xyz model, which this app does not open"):
        plan_download("org/unknown-type")


def test_the_get_command(hub, capsys, repo_files):
    from explorer.cli import main

    assert main(["get"]) == 0
    listed = capsys.readouterr().out
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in listed and "gated: needs a token" in listed

    assert main(["get", REPO, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "5 files" in out and "model.safetensors" in out and not hub.fetched("model.safetensors")

    assert main(["get", REPO]) == 0
    out = capsys.readouterr().out
    assert f"transformer-explorer {REPO}" in out
    assert main(["info", "--checkpoint", REPO]) == 0  # it opens by its id, from the cache
    assert "gpt2" in capsys.readouterr().out

    assert main(["get", "no-such/model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no repository no-such/model") and "\n" not in err
