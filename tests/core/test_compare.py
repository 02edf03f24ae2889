"""Comparing two models on the same tokens (explorer/core/analysis/compare.py, ``transformer-explorer compare``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from explorer.cli import main
from explorer.core.analysis.compare import (
    TokenizerMismatch,
    compare_models,
    depth_map,
    js_divergence,
    kl_divergence,
    logit_kl,
)
from explorer.core.checkpoint import load_checkpoint

PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind"


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint("shakespeare", device="cpu")


def test_kl_and_js_on_small_arrays_by_hand():
    p, q = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    assert kl_divergence(q, p) == pytest.approx(math.log(2))
    assert kl_divergence(p, q) == math.inf
    assert js_divergence(p, q) == pytest.approx(0.75 * math.log(4 / 3))
    assert js_divergence(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(math.log(2))  # the maximum
    assert js_divergence(p, p) == 0.0
    kl = logit_kl(np.array([[0.0, 0.0], [1.0, 2.0]]), np.array([[0.0, math.log(3)], [1.0, 2.0]]))
    assert kl[0] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3)) and kl[1] == pytest.approx(0.0, abs=1e-15)
    assert list(depth_map(4, 2)) == [0, 0, 1, 2, 2] and list(depth_map(2, 4)) == [0, 2, 4]


def test_a_model_compared_with_itself_gives_cosine_1_and_no_divergence(shakespeare):
    result = compare_models(shakespeare, shakespeare, PROMPT)
    L, H, n = shakespeare.config.n_layers, shakespeare.config.n_heads, len(result.token_ids)
    assert result.resid_cos.shape == (L + 1, n) and result.head_js.shape == (L, H) and result.logit_kl.shape == (n,)
    np.testing.assert_allclose(result.resid_cos, 1.0, atol=1e-12)
    assert np.all(result.head_js == 0) and np.all(result.logit_kl == 0) and np.all(result.resid_rel == 0)
    assert result.first_block is None and result.first_boundary is None and result.first_position is None


@pytest.mark.parametrize("k", [1, 2])
def test_changed_query_weights_in_layer_k_diverge_from_layer_k_on(shakespeare, k):
    other = load_checkpoint("shakespeare", device="cpu")
    with torch.no_grad():
        other.model.blocks[k].attn.W_Q.weight.add_(0.5 * torch.randn(other.model.blocks[k].attn.W_Q.weight.shape,
                                                                     generator=torch.Generator().manual_seed(k)))
    result = compare_models(shakespeare, other, PROMPT)
    assert np.all(result.head_js[:k] == 0) and np.all(result.resid_cos[: k + 1] == pytest.approx(1.0, abs=1e-12))
    assert np.all(result.head_js[k:].max(-1) > 1e-4)  # every layer from k on reads differently
    assert np.all(result.resid_cos[k + 1:].min(-1) < 1 - 1e-5)  # the stream after block k has turned
    assert result.first_block == k and result.first_boundary == k + 1 and result.logit_kl.max() > 1e-4


def test_models_of_different_depth_are_compared_by_relative_depth(shakespeare):
    induction = load_checkpoint("induction", device="cpu")
    result = compare_models(shakespeare, induction, PROMPT)
    assert result.resid_cos.shape[0] == 5 and result.head_js.shape == (4, 4)
    assert list(result.layer_map) == [0, 0, 1, 2, 2] and any("relative depth" in n for n in result.notes)


def test_different_tokenizers_are_refused_with_one_line(shakespeare, tmp_path, capsys):
    with pytest.raises(TokenizerMismatch, match="same tokenizer"):
        compare_models(shakespeare, load_checkpoint("worked-example", device="cpu"), "Today is sunday")
    assert main(["compare", "-c", "shakespeare", "--other", "worked-example", "-p", "Today is sunday",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same tokenizer" in err[0] and not (tmp_path / "compare.npz").exists()


def test_the_command_writes_compare_npz(tmp_path, capsys):
    out = tmp_path / "new" / "dir"
    assert main(["compare", "-c", "shakespeare", "--other", "induction", "-p", PROMPT, "--out", str(out)]) == 0
    with np.load(out / "compare.npz") as data:
        n = len(data["token_ids"])
        assert data["resid_cos"].shape == (5, n) and data["head_js"].shape == (4, 4) and data["logit_kl"].shape == (n,)
        assert np.all(data["logit_kl"] >= 0) and np.all(data["head_js"] <= math.log(2) + 1e-6)
        assert list(data["first_diverge"]) == [0, 0, 0]
    assert "first differs" in capsys.readouterr().out


def test_different_head_counts_compare_head_averaged_patterns_and_different_widths_no_cosine():
    pytest.importorskip("transformers")
    from decoder_reference import VOCAB, build

    from explorer.core.checkpoint.in_memory import register
    from explorer.core.tokenize.base import VocabTokenizer

    def tiny(**overrides):
        model = build("LlamaConfig", "LlamaForCausalLM", **overrides)
        return load_checkpoint(register(model, VocabTokenizer([f"w{i}" for i in range(VOCAB)])), device="cpu")

    prompt = "w5 w17 w99 w3 w50 w42"
    four, two = tiny(), tiny(num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=3)
    result = compare_models(four, two, prompt)
    assert result.head_js.shape == (2, 1) and result.resid_cos.shape == (3, 6)
    assert list(result.layer_map) == [0, 2, 3]  # A's 2 layers against B's 3 by relative depth
    assert any("heads" in n for n in result.notes) and any("relative depth" in n for n in result.notes)
    assert np.all(result.head_js > 0) and np.all(np.isfinite(result.resid_cos))
    wide = tiny(hidden_size=128)
    result = compare_models(four, wide, prompt)
    assert np.all(np.isnan(result.resid_cos)) and any("dimensions" in n for n in result.notes)
    assert result.head_js.shape == (2, 4) and np.all(np.isfinite(result.logit_kl))


def test_a_model_that_outputs_nan_is_named_and_never_said_to_agree(tmp_path, capsys):
    """Issue 34: a copy of the model with NaN in one block's weights (a broken fine-tune, say): compare names
    model B, says which parts it cannot compare, and never that they "agree"."""
    import shutil

    from safetensors.torch import load_file, save_file

    from explorer.core.paths import models_dir

    broken = tmp_path / "broken"
    shutil.copytree(models_dir() / "shakespeare", broken)
    weights = load_file(str(broken / "model.safetensors"))
    name = next(k for k in weights if k.startswith("blocks.2.") and k.endswith("mlp.W_out.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(broken / "model.safetensors"))
    assert main(["compare", "-c", "shakespeare", "--other", str(broken), "-p", PROMPT, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: model B (") and "non-finite values" in err[0], err
    assert "model A" not in err[0] and "residual stream" in err[0] and "logits" in err[0]
    assert "agree" not in captured.out and "next-token distributions not compared" in captured.out
    with np.load(tmp_path / "compare.npz") as data:
        assert data["nonfinite"].tolist() == [[False, False, False], [True, True, True]]
