"""GPT-NeoX (Pythia) checkpoints against transformers: partial rotary, parallel and sequential residuals,
Pythia's old tensor names in pytorch_model.bin."""

from __future__ import annotations

import json

import pytest
import torch
from loader_reference import build, compare

from explorer.core.checkpoint import load_checkpoint

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_partial_rotary_matches_reference(tmp_path, parallel):
    model = build("gpt_neox", hidden_size=64, rotary_pct=0.25, rotary_emb_base=1000,
                  use_parallel_residual=parallel)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    cfg = loaded.config
    assert loaded.arch == "gpt-neox" and cfg.parallel_residual is parallel
    assert (cfg.d_head, cfg.rotary_dim, cfg.rotary_base, cfg.norm) == (16, 4, 1000.0, "layernorm")
    compare(loaded, model)


def test_gpt_neox_old_names_in_pytorch_model_bin(tmp_path):
    """Pythia's files: ``embed_out`` for the un-embedding, mask buffers and inv_freq beside the weights."""
    model = build("gpt_neox", rotary_pct=0.5)
    config = model.config.to_dict()
    params = config.pop("rope_parameters")  # written the way transformers 4 wrote it
    config.update(rotary_pct=params["partial_rotary_factor"], rotary_emb_base=params["rope_theta"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    state = dict(model.state_dict())
    if "lm_head.weight" in state:  # transformers before 5.13 names it embed_out already
        state["embed_out.weight"] = state.pop("lm_head.weight")
    assert "embed_out.weight" in state and "lm_head.weight" not in state
    for i in range(3):
        state[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(1, 1, 64, 64, dtype=torch.bool).tril()
        state[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        state[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = torch.ones(2)
    torch.save(state, tmp_path / "pytorch_model.bin")
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.rotary_dim == 4
    compare(loaded, model)
