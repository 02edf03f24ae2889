"""A pickle bomb in pytorch_model.bin is refused quickly and named for what it is: a deflated data.pkl
of NONE/POP opcodes is a decompression bomb (not "could run code"), a stored one runs out of the time
and size budgets, and neither takes the memory its opcodes would."""

from __future__ import annotations

import shutil
import time
import zipfile

import pytest
import torch
from safetensors.torch import load_file

from explorer.core.checkpoint import load_checkpoint, pickles
from explorer.core.errors import CheckpointError


def bomb(folder, tiny_gpt2_dir, ops: int, compression: int) -> None:
    folder.mkdir()
    shutil.copy(tiny_gpt2_dir / "config.json", folder / "config.json")
    real = folder / "real.bin"
    torch.save(load_file(tiny_gpt2_dir / "model.safetensors"), real)
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(folder / "pytorch_model.bin", "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/data.pkl"):
                data = b"\x80\x02" + b"N0" * ops + data[2:]
                out.writestr(info.filename, data, compress_type=compression)
            else:
                out.writestr(info, data)
    real.unlink()


def test_a_deflated_none_pop_bomb_is_refused_at_once_as_a_decompression_bomb(tiny_gpt2_dir, tmp_path):
    bomb(tmp_path / "m", tiny_gpt2_dir, 30 * 2**20, zipfile.ZIP_DEFLATED)  # 60 MB of opcodes, ~60 KB deflated
    with zipfile.ZipFile(tmp_path / "m" / "pytorch_model.bin") as archive:
        assert next(i for i in archive.infolist() if i.filename.endswith("data.pkl")).compress_size < 2**20
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "m", device="cpu")
    message = str(info.value)
    assert "decompression bomb" in message and "run code" not in message and "\n" not in message
    assert time.perf_counter() - started < 20


def test_a_stored_none_pop_pickle_runs_out_of_its_budget_naming_its_opcodes(tiny_gpt2_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(pickles, "MAX_PICKLE_SECONDS", 0.5)
    bomb(tmp_path / "m", tiny_gpt2_dir, 8 * 2**20, zipfile.ZIP_STORED)
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "m", device="cpu")
    message = str(info.value)
    assert "NONE" in message and "POP" in message and "run code" not in message
    assert time.perf_counter() - started < 20
    monkeypatch.setattr(pickles, "MAX_PICKLE_BYTES", 2**20)  # the size budget, independent of speed
    monkeypatch.setattr(pickles, "MAX_PICKLE_SECONDS", 1e9)
    with pytest.raises(CheckpointError, match="data.pkl is 16,7") as info:
        load_checkpoint(tmp_path / "m", device="cpu")
    assert "run code" not in str(info.value)
