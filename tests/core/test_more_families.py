"""Phi-3, Phi, GPT-Neo, OPT, BLOOM, Falcon and GPT-J checkpoints against ``transformers``.

Each family is built with ``transformers`` (tiny, random, eager attention), saved with
``save_pretrained`` (safetensors), opened through ``load_checkpoint`` and compared from token ids by
``decoder_reference.check``: logits, every layer's attention pattern (stored, and derived by the
Trace from q and k), the residual stream entering each block and after the final norm, the logits
derived from ``resid_final``, re-run block internals, and greedy generation
(``explorer.core.generation.generate`` against ``model.generate(do_sample=False)``, with and without
the KV cache). Prompts are longer than any local-attention window.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decoder_reference import IDS, TOL, VOCAB, check, ours_greedy, reference_greedy
from decoder_reference import build as build_model

from explorer.core.checkpoint import load_checkpoint
from explorer.core.errors import CheckpointError
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


def build(config_name: str, model_name: str, path, **overrides):
    """A tiny random transformers model saved to ``path`` with save_pretrained: (model, path)."""
    model = build_model(config_name, model_name, **overrides)
    model.save_pretrained(path)
    return model, path


def compare(loaded, model, ids=IDS) -> dict[str, float]:
    return check(loaded, model, ids)


def score_difference(derived: np.ndarray, stored: np.ndarray) -> float:
    """Max abs difference of two score matrices whose masked (-inf) entries must coincide."""
    assert np.array_equal(np.isinf(derived), np.isinf(stored))
    finite = np.isfinite(stored)
    return float(np.abs(derived[finite] - stored[finite]).max())


# --- Phi-3 -------------------------------------------------------------------------------------

PHI3 = {"pad_token_id": 0}


@pytest.mark.parametrize("extra", [{"num_key_value_heads": 2, "sliding_window": 5},
                                   {"num_key_value_heads": 4, "sliding_window": None, "partial_rotary_factor": 0.5,
                                    "tie_word_embeddings": True}])
def test_phi3_matches_reference(tmp_path, extra):
    model, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **{**PHI3, **extra})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "phi3" and cfg.kv_heads == extra["num_key_value_heads"]
    assert cfg.sliding_window == extra["sliding_window"]
    compare(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    if extra["sliding_window"]:  # the window is in the mask: the last query sees exactly W keys
        assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == 5
    else:
        assert cfg.rotary_dim == 8
        assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == len(IDS)


def test_phi3_longrope_matches_reference(tmp_path):
    """LongRoPE with an original context of 8: the 16-token prompt uses the long factors, a 6-token one
    the short factors; cos and sin are scaled by the attention factor sqrt(1 + ln 8 / ln 8)."""
    gen = torch.Generator().manual_seed(1)
    short, long = 1.0 + 3 * torch.rand(8, generator=gen), 1.0 + 3 * torch.rand(8, generator=gen)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short.tolist(),
            "long_factor": (long * 4).tolist(), "original_max_position_embeddings": 8}
    model, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **{**PHI3, "rope_parameters": rope,
                                                                     "original_max_position_embeddings": 8})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert cfg.rope["rope_type"] == "longrope" and cfg.rope["max_position_embeddings"] == 64
    assert any("LongRoPE" in note for note in loaded.notes)
    compare(loaded, model)  # 16 tokens: beyond the original context, the long factors
    with torch.no_grad():  # 6 tokens: within it, the short factors
        ref = model(torch.tensor([IDS[:6]])).logits[0].numpy()
    assert np.abs(loaded.trace_ids(IDS[:6])["logits"] - ref).max() < TOL


def test_phi3_longrope_with_the_wrong_number_of_factors_is_refused(tmp_path):
    import json

    _, path = build("Phi3Config", "Phi3ForCausalLM", tmp_path, **PHI3)
    config = json.loads((path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["original_max_position_embeddings"] = 8
    config["rope_scaling"] = {"type": "su", "short_factor": [1.0] * 5, "long_factor": [2.0] * 5}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="short_factor has 5 factors.*need 8"):
        load_checkpoint(path)


# --- Phi-1/1.5/2 --------------------------------------------------------------------------------

def test_phi_parallel_block_with_one_norm_matches_reference(tmp_path):
    model, path = build("PhiConfig", "PhiForCausalLM", tmp_path, partial_rotary_factor=0.5, pad_token_id=0)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "phi" and cfg.shared_norm and cfg.parallel_residual and cfg.unembed_bias
    assert cfg.rotary_dim == 8 and loaded.model.blocks[0].ln2 is None
    compare(loaded, model)
    trace = loaded.trace_ids(IDS)
    assert "blocks.0.ln1.mean" in trace and "blocks.0.ln2.mean" not in trace


def test_phi_with_qk_layernorm_is_refused(tmp_path):
    _, path = build("PhiConfig", "PhiForCausalLM", tmp_path, qk_layernorm=True, pad_token_id=0)
    with pytest.raises(CheckpointError, match="qk_layernorm"):
        load_checkpoint(path)


# --- GPT-Neo -------------------------------------------------------------------------------------

def test_gpt_neo_local_layers_and_unscaled_scores_match_reference(tmp_path):
    model, path = build("GPTNeoConfig", "GPTNeoForCausalLM", tmp_path, num_layers=2, num_heads=4,
                        attention_types=[[["global", "local"], 1]], window_size=5)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "gpt-neo" and cfg.attn_scale == 1.0
    assert cfg.sliding_window == 5 and cfg.sliding_layers == (1,)
    compare(loaded, model)
    trace = loaded.trace_ids(IDS, CaptureSpec.compact())
    assert np.isfinite(trace.head(0, 0, "scores")[-1]).sum() == len(IDS)  # global layer: every earlier key
    assert np.isfinite(trace.head(1, 0, "scores")[-1]).sum() == 5         # local layer: the last 5 keys
    # unscaled: the stored score is the plain dot product of the stored q and k
    q, k = trace["blocks.0.attn.q"][0], trace["blocks.0.attn.k"][0]
    assert np.allclose(trace.head(0, 0, "scores")[3, 2], q[3] @ k[2], atol=1e-4)


def test_new_switches_survive_the_config_json_round_trip():
    import json

    from explorer.core.config import ModelConfig

    cfg = ModelConfig(vocab_size=10, n_ctx=16, d_model=8, n_layers=2, n_heads=2, d_head=4, d_ff=16,
                      attn_scale=1.0, alibi=True, sliding_window=3, sliding_layers=(1,), rotary_interleaved=True,
                      parallel_residual=True, shared_norm=True, embed_norm=True, unembed_bias=True, d_embed=4)
    again = ModelConfig.from_dict(json.loads(cfg.to_json()))  # JSON turns the tuple into a list
    assert again == cfg and again.sliding_layers == (1,) and hash(again) == hash(cfg)
    with pytest.raises(CheckpointError, match="shared_norm"):
        ModelConfig(vocab_size=10, n_ctx=16, d_model=8, n_layers=2, n_heads=2, d_head=4, d_ff=16, shared_norm=True)


# --- OPT ---------------------------------------------------------------------------------------------

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


# --- BLOOM ---------------------------------------------------------------------------------------------

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


# --- Falcon --------------------------------------------------------------------------------------------

FALCON = {"pad_token_id": 0}
FALCON_VARIANTS = {
    "falcon-7b-like": ({"multi_query": True, "parallel_attn": True}, 1, True),
    "falcon-40b-like": ({"new_decoder_architecture": True, "num_kv_heads": 2}, 2, False),
    "sequential-with-bias": ({"multi_query": False, "parallel_attn": False, "bias": True}, 4, False),
}
FALCON_RW = {"alibi": True, "multi_query": False, "parallel_attn": False, "bias": True}


@pytest.mark.parametrize("variant", list(FALCON_VARIANTS))
def test_falcon_matches_reference(tmp_path, variant):
    extra, kv_heads, shared = FALCON_VARIANTS[variant]
    model, path = build("FalconConfig", "FalconForCausalLM", tmp_path, **{**FALCON, **extra})
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "falcon" and cfg.kv_heads == kv_heads and cfg.shared_norm is shared
    assert cfg.parallel_residual is extra.get("parallel_attn", True) and not cfg.alibi
    compare(loaded, model)


def test_falcon_rw_adds_alibi_before_the_scale(tmp_path):
    """Falcon-RW: scores = (q.k + ALiBi bias) / sqrt(d_head). transformers 5's eager Falcon path adds the
    bias twice (once in the attention, once more through the mask it builds), its SDPA path once, as
    the original model and transformers 4 did; so logits, hidden states and greedy tokens are compared
    with the SDPA path, and the patterns with their definition computed from the stored q and k."""
    from explorer.core.model import alibi_bias

    model, path = build("FalconConfig", "FalconForCausalLM", tmp_path, **{**FALCON, **FALCON_RW})
    model.config._attn_implementation = "sdpa"  # the reference path (see the docstring)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert cfg.alibi and cfg.alibi_before_scale and cfg.positions == "none" and not cfg.parallel_residual
    with torch.no_grad():
        ref = model(torch.tensor([IDS]), output_hidden_states=True)
    full = loaded.trace_ids(IDS, CaptureSpec.everything())
    assert np.abs(full["logits"] - ref.logits[0].numpy()).max() < TOL
    assert float(ref.logits.abs().max()) > 1.0
    for i in range(cfg.n_layers):
        assert np.abs(full[f"blocks.{i}.resid_pre"] - ref.hidden_states[i][0].numpy()).max() < TOL
    compact = loaded.trace_ids(IDS, CaptureSpec.compact())
    n, lower = len(IDS), np.tril(np.ones((len(IDS), len(IDS)), dtype=bool))
    for i in range(cfg.n_layers):
        q, k = full[f"blocks.{i}.attn.q"], full[f"blocks.{i}.attn.k"]
        for h in range(cfg.n_heads):
            expected = np.where(lower, (q[h] @ k[h].T + alibi_bias(4, n, n).numpy()[h]) / np.sqrt(cfg.d_head), -np.inf)
            pattern = np.exp(expected - expected.max(-1, keepdims=True))
            pattern /= pattern.sum(-1, keepdims=True)
            assert np.abs(full[f"blocks.{i}.attn.pattern"][h] - pattern).max() < TOL
            assert np.abs(compact.head(i, h) - pattern).max() < TOL
            assert score_difference(compact.head(i, h, "scores"), expected) < TOL
    expected_ids = reference_greedy(model, IDS, 6)
    assert ours_greedy(loaded, IDS, 6) == expected_ids
    assert ours_greedy(loaded, IDS, 6, use_cache=False) == expected_ids


# --- GPT-J ----------------------------------------------------------------------------------------------

def test_gptj_interleaved_partial_rotary_matches_reference(tmp_path):
    model, path = build("GPTJConfig", "GPTJForCausalLM", tmp_path, rotary_dim=8, pad_token_id=0)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert loaded.arch == "gptj" and cfg.rotary_interleaved and cfg.rotary_dim == 8 and cfg.shared_norm
    compare(loaded, model)


def test_interleaved_rotary_turns_adjacent_pairs():
    from explorer.core.model import (
        apply_rotary,
        apply_rotary_interleaved,
        rotary_angles,
    )

    cos, sin = rotary_angles(torch.arange(5), 4, 10000.0)
    x = torch.randn(1, 1, 5, 6)
    y = apply_rotary_interleaved(x, cos, sin)
    assert torch.equal(y[..., 4:], x[..., 4:])  # the dimensions past rotary_dim pass through
    # the same rotation as the half layout once the pairs are gathered: (x0, x2 | x1, x3) <-> (x0, x1, x2, x3)
    half = apply_rotary(x[..., [0, 2, 1, 3, 4, 5]], cos, sin)
    assert torch.allclose(y, half[..., [0, 2, 1, 3, 4, 5]], atol=1e-6)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths


def test_supported_formats_name_these_families():
    from explorer.core.checkpoint import supported_formats

    text = supported_formats()
    for name in ("phi3", "phi", "gpt_neo", "opt", "bloom", "falcon", "gptj"):
        assert repr(name) in text


def test_scores_formula_names_each_architectures_rule():
    from explorer.core.config import ModelConfig
    from explorer.core.display.labels import scores_formula

    base = {"vocab_size": 10, "n_ctx": 16, "d_model": 8, "n_layers": 2, "n_heads": 2, "d_head": 4, "d_ff": 16}
    assert scores_formula(ModelConfig(**base), 0) == "scores q\u00b7k/\u221ad_head"
    assert scores_formula(ModelConfig(**base, alibi=True), 0) == "scores q\u00b7k/\u221ad_head + ALiBi bias"
    neo = ModelConfig(**base, attn_scale=1.0, sliding_window=4, sliding_layers=(1,))
    assert scores_formula(neo, 0) == "scores q\u00b7k" and scores_formula(neo, 1) == "scores q\u00b7k, sliding window 4"


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
