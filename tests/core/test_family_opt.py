"""OPT checkpoints against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, TOL, VOCAB, compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint

pytest.importorskip("transformers")


OPT = {"ffn_dim": 96, "pad_token_id": 1}


@pytest.mark.parametrize("extra", [{}, {"do_layer_norm_before": False, "word_embed_proj_dim": 32}],
                         ids=["opt-125m-like", "opt-350m-like"])
def test_opt_matches_reference(tmp_path, extra):
    model, path = build("OPTConfig", "OPTForCausalLM", tmp_path, **{**OPT, **extra})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "opt" and cfg.activation == "relu"
    if extra:
        assert cfg.norm_placement == "post" and not cfg.final_norm and cfg.d_embed == 32
        assert tuple(loaded.model.embed.weight.shape) == (VOCAB, 32)
    compare(loaded, model)
    if extra:  # a neuron's vocabulary effect goes through project_out into the narrower embedding space
        from explorer.core.analysis.neurons import neuron_vocab_effect

        trace = loaded.trace_ids(IDS)
        top, values, _, _ = neuron_vocab_effect(trace, 1, 3, k=5)
        w = loaded.model
        direct = (w.unembed.weight @ (w.project_out.weight @ w.blocks[1].mlp.W_out.weight[:, 3])).detach().numpy()
        assert np.allclose(values, direct[top], atol=1e-5)
    # position i reads row i + 2 of OPT's table
    theirs = model.model.decoder.embed_positions.weight
    assert torch.equal(loaded.model.pos_embed.weight[0], theirs[2])


def test_opt_saved_without_the_model_prefix(tmp_path):
    """The facebook/opt-* files name their tensors "decoder. ..." (saved from OPTModel), with no lm_head."""
    from safetensors.torch import load_file, save_file

    model, path = build("OPTConfig", "OPTForCausalLM", tmp_path, **OPT)
    weights = load_file(str(path / "model.safetensors"))
    save_file({k.removeprefix("model."): v.contiguous() for k, v in weights.items() if k != "lm_head.weight"},
              str(path / "model.safetensors"))
    loaded = load_checkpoint(path)
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(loaded.trace_ids(IDS)["logits"] - ref).max() < TOL
