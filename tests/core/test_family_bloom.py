"""BLOOM checkpoints and ALiBi against transformers on tiny random models.

Each model is built with transformers (tiny, random, eager attention), saved with save_pretrained
(safetensors), opened through load_checkpoint and compared from token ids by
``decoder_reference.check`` (logits, every attention pattern, stored and derived, the residual
stream, greedy tokens with and without the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, TOL, compare
from decoder_reference import build_saved as build

from explorer.core.checkpoint import load_checkpoint
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


@pytest.mark.parametrize("heads", [4, 6])  # 6: ALiBi's slopes for a head count that is not a power of two
def test_bloom_alibi_matches_reference(tmp_path, heads):
    from explorer.core.model import alibi_bias

    model, path = build("BloomConfig", "BloomForCausalLM", tmp_path, hidden_size=8 * heads,
                        num_attention_heads=heads, pad_token_id=0)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "bloom" and cfg.alibi and cfg.embed_norm and cfg.positions == "none"
    assert cfg.n_heads == heads and cfg.d_head == 8
    compare(loaded, model)
    # the scores shown are q.k / sqrt(dh) + ALiBi bias: -slope_h * (i - j) on top of the plain dot products
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    q, k = trace["blocks.1.attn.q"], trace["blocks.1.attn.k"]
    bias = alibi_bias(heads, len(IDS), len(IDS)).numpy()
    for h in (0, heads - 1):
        plain = q[h] @ k[h].T / np.sqrt(cfg.d_head)
        scores = trace.head(1, h, "scores")
        lower = np.tril(np.ones_like(plain, dtype=bool))
        assert np.allclose(scores[lower], (plain + bias[h])[lower], atol=1e-4)
        assert bias[h][5, 2] < 0 and bias[h][5, 5] == 0


def test_alibi_slopes_are_the_papers():
    from explorer.core.model import alibi_slopes

    assert np.allclose(alibi_slopes(8).numpy(), [2.0 ** -(i + 1) for i in range(8)])
    assert np.allclose(alibi_slopes(4).numpy(), [2.0 ** -(2 * (i + 1)) for i in range(4)])
    # 12 heads: the 8 slopes of H'=8, then every other slope of the 16-head sequence (2^-0.5, 2^-1.5, ...)
    assert np.allclose(alibi_slopes(12).numpy()[8:], [2.0 ** -(0.5 + i) for i in range(4)])


def test_bloom_with_its_tokenizer_json_runs_on_text(tmp_path):
    """End to end: a BLOOM directory with a byte-level BPE tokenizer.json opens, encodes text as the
    ``tokenizers`` library does, and its logits on that text equal the reference's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["the attention of each head looks back over the tokens before it"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    vocab = tok.get_vocab_size()
    model, path = build("BloomConfig", "BloomForCausalLM", tmp_path, vocab_size=vocab, pad_token_id=0)
    tok.save(str(path / "tokenizer.json"))
    loaded = load_checkpoint(path)
    text = "each head looks back"
    ids, _ = loaded.encode(text)
    assert ids == tok.encode(text).ids and len(ids) < len(text)  # merges were applied
    trace = loaded.trace(text)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(trace["logits"] - ref).max() < TOL
