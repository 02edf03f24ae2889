"""Issue 34: offloaded weights are ours to remove, and nothing else in --offload-dir is. The subfolder goes
when the model is closed, when the process ends (SIGTERM included), and after a crash at the next start;
a missing --offload-dir is refused, never made with its parents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.core.checkpoint import load_checkpoint
from explorer.core.placement import Placement, resident_bytes
from tests.core.test_placement import llama_dir  # noqa: F401  (the fixture: a 4-layer Llama)

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("accelerate", reason="offloading needs the optional accelerate package")


def budget(llama_dir: Path) -> int:
    """A third of the model in CPU memory: the rest goes to disk."""
    return resident_bytes(load_checkpoint(llama_dir, device="cpu").model) // 3


def flags(llama_dir: Path, root: Path) -> list[str]:
    return ["--device-map", "sequential", "--max-memory", f"cpu={budget(llama_dir)}", "--offload-dir", str(root)]


def offloaded(llama_dir: Path, root: Path):
    placement = Placement("sequential", {"cpu": budget(llama_dir)}, str(root))
    loaded = load_checkpoint(llama_dir, device="cpu", placement=placement)
    assert "disk" in loaded.model.hf_device_map.values()
    return loaded


def our_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith("offload-") and (p / ".explorer-offload.json").exists())


def test_closing_the_model_removes_its_offloaded_blocks_and_nothing_else(llama_dir, tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    (root / "my-notes.txt").write_text("mine")
    (root / "offload-mine").mkdir()  # the user's own folder with a name like ours: never touched
    (root / "offload-mine" / "keep.safetensors").write_text("mine")
    loaded = offloaded(llama_dir, root)
    [folder] = our_folders(root)
    assert any(folder.glob("*.safetensors"))
    loaded.close()
    assert not folder.exists()
    assert (root / "my-notes.txt").read_text() == "mine" and (root / "offload-mine" / "keep.safetensors").exists()


CRASH = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from explorer.cli import main
    from explorer.commands import info, load_model

    def run(args):
        loaded = load_model(args)
        assert "disk" in loaded.model.hf_device_map.values()
        os.kill(os.getpid(), signal.{signal})  # killed while the model is open
        return 0

    info.run = run
    sys.exit(main(["info", "--checkpoint", {path!r}, *{flags!r}]))
""")


def _run_and_kill(llama_dir: Path, root: Path, signal: str) -> int:
    script = CRASH.format(root=str(ROOT), path=str(llama_dir), flags=flags(llama_dir, root), signal=signal)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300).returncode


def test_sigterm_ends_a_command_with_its_offloaded_blocks_removed(llama_dir, tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    assert _run_and_kill(llama_dir, root, "SIGTERM") == 128 + 15
    assert list(root.iterdir()) == []


def test_a_crash_leaves_blocks_that_the_next_start_removes(llama_dir, tmp_path):
    import psutil

    root = tmp_path / "scratch"
    root.mkdir()
    assert _run_and_kill(llama_dir, root, "SIGKILL") == -9
    [left] = our_folders(root)  # a kill runs no clean-up
    alive = root / "offload-alive"  # another process of ours that is still running: its blocks stay
    alive.mkdir()
    parent = psutil.Process(os.getppid())
    (alive / ".explorer-offload.json").write_text(json.dumps({"format": "transformer-explorer offload",
                                                               "pid": parent.pid, "started": parent.create_time()}))
    loaded = offloaded(llama_dir, root)  # the next start
    assert not left.exists() and alive.exists()
    assert len(our_folders(root)) == 2
    loaded.close()


def test_a_missing_offload_dir_is_refused_and_not_created(llama_dir, tmp_path, capsys):
    missing = tmp_path / "typo" / "offload"
    assert main(["info", "--checkpoint", str(llama_dir), *flags(llama_dir, missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--offload-dir" in err[0] and "does not exist" in err[0], err
    assert list(tmp_path.iterdir()) == []
