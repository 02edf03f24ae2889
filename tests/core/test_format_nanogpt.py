"""nanoGPT ckpt.pt files against the transformers GPT-2 they were converted from: with and without biases,
meta.pkl vocabularies, GPT-2's vocabulary without one."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from loader_reference import TOL, VOCAB, compare, reference, spread_weights

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError

transformers = pytest.importorskip("transformers")


def nanogpt_state(model, bias: bool) -> dict[str, torch.Tensor]:
    """A transformers GPT-2 in nanoGPT's layout: nn.Linear [out, in] weights, ``_orig_mod.`` prefixes."""
    sd = model.state_dict()
    out = {}
    for k, v in sd.items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if not bias and k.endswith(".bias"):
            continue
        if k.endswith(".weight") and v.dim() == 2 and any(s in k for s in ("c_attn", "c_proj", "c_fc")):
            v = v.t().contiguous()  # Conv1D [in, out] -> nn.Linear [out, in]
        out["_orig_mod." + k] = v
    out["_orig_mod.lm_head.weight"] = out["_orig_mod.transformer.wte.weight"]
    return out


def nanogpt_reference(bias: bool, vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=48, vocab_size=vocab,
                                       activation_function="gelu", attn_implementation="eager")).eval()
    spread_weights(model)
    if not bias:  # nanoGPT's bias=False: zero biases in the reference, absent from the checkpoint
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
    return model


@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_ckpt_matches_reference(tmp_path, bias):
    model = nanogpt_reference(bias, VOCAB)
    ckpt = {"model": nanogpt_state(model, bias),
            "model_args": dict(n_layer=2, n_head=4, n_embd=32, block_size=48, bias=bias, vocab_size=VOCAB,
                               dropout=0.0),
            "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(2)}},
                          "param_groups": [{"lr": 6e-4, "params": [0]}]},
            "iter_num": 3, "best_val_loss": torch.tensor(1.5),
            "config": {"dataset": "shakespeare_char", "batch_size": 12, "compile": True, "init_from": "scratch"}}
    torch.save(ckpt, tmp_path / "ckpt.pt")
    chars = [chr(32 + i) for i in range(VOCAB)]
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": VOCAB, "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)
    loaded = load_checkpoint(tmp_path / "ckpt.pt", device="cpu")
    assert loaded.arch == "nanogpt" and loaded.info()["architecture"] == "nanogpt"
    assert loaded.config.tie_embeddings and loaded.config.attn_bias is bias and loaded.config.activation == "gelu"
    assert loaded.tokenizer.vocab_size == VOCAB and loaded.tokenizer.encode("Hi!") == [ord("H") - 32, ord("i") - 32, 1]
    compare(loaded, model)
    assert load_checkpoint(tmp_path, device="cpu").arch == "nanogpt"  # nanoGPT's out_dir works too


def test_nanogpt_gpt2_vocabulary_without_meta(tmp_path):
    model = nanogpt_reference(True, 50304)
    torch.save({"model": nanogpt_state(model, True),
                "model_args": dict(n_layer=2, n_head=4, n_embd=32, block_size=48, bias=True, vocab_size=50304,
                                   dropout=0.0)}, tmp_path / "ckpt.pt")
    loaded = load_checkpoint(tmp_path / "ckpt.pt", device="cpu")
    assert loaded.tokenizer.name == "gpt2" and loaded.tokenizer.encode("Hello world") == [15496, 995]
    ids = loaded.tokenizer.encode("The quick brown fox")
    trace = loaded.trace_ids(ids)
    assert np.abs(trace["logits"] - reference(model, ids).logits[0].numpy()).max() < TOL


def test_nanogpt_small_vocabulary_needs_meta(tmp_path):
    model = nanogpt_reference(True, 65)
    torch.save({"model": nanogpt_state(model, True),
                "model_args": dict(n_layer=2, n_head=4, n_embd=32, block_size=48, bias=True, vocab_size=65)},
               tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="no meta.pkl"):
        load_checkpoint(tmp_path / "ckpt.pt")
