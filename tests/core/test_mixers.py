"""The recurrent mixers' two forms and their derived values, on random inputs and a tiny hybrid model.

What a user sees: a prompt computed in chunks and the same prompt decoded a token at a time give the same outputs,
states and state norms; the effective attention of any block of rows x columns equals that block of the whole map
(long prompts are drawn tile by tile); the trace lists and shapes every mixer key.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from explorer.core.config import ModelConfig
from explorer.core.loaded import LoadedModel
from explorer.core.mixers import deltanet, mamba2
from explorer.core.mixers.effective import effective_attention, effective_block, effective_kind, head_count
from explorer.core.model import Transformer
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec
from explorer.core.trace_keys import EFFECTIVE, block_sites, site_shape

GEN = torch.Generator().manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN)


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("n", [5, 64, 150])
def test_deltanet_chunked_and_step_forms_agree(n):
    B, H, dk, dv = 2, 3, 8, 6
    q, k, v = unit(rand(B, H, n, dk)) * dk ** -0.5, unit(rand(B, H, n, dk)), rand(B, H, n, dv)
    g, beta = -torch.rand(B, H, n, generator=GEN), torch.rand(B, H, n, generator=GEN)
    start = rand(B, H, dk, dv) * 0.1
    y1, s1, n1 = deltanet.chunked(q, k, v, g, beta, start, norms=True)
    y2, s2, n2 = deltanet.recurrent(q, k, v, g, beta, start, norms=True)
    assert torch.allclose(y1, y2, atol=1e-5) and torch.allclose(s1, s2, atol=1e-5)
    assert torch.allclose(n1, n2, rtol=1e-4, atol=1e-5)   # the state's norm per token, without building the states


@pytest.mark.parametrize("n, chunk", [(7, 4), (33, 8), (20, 256)])
def test_mamba2_chunked_and_step_forms_agree(n, chunk):
    B, H, P, N = 2, 4, 5, 6
    x, Bm, Cm = rand(B, H, n, P), rand(B, H, n, N), rand(B, H, n, N)
    dt, A = torch.rand(B, H, n, generator=GEN) + 0.05, -torch.rand(H, generator=GEN) * 2
    start = rand(B, H, P, N) * 0.1
    y1, s1, n1 = mamba2.chunked(x, dt, A, Bm, Cm, chunk, start, norms=True)
    y2, s2, n2 = mamba2.step(x, dt, A, Bm, Cm, start, norms=True)
    assert torch.allclose(y1, y2, atol=1e-5) and torch.allclose(s1, s2, atol=1e-5)
    assert torch.allclose(n1, n2, rtol=1e-4, atol=1e-5)


HYBRID = dict(arch="hybrid", vocab_size=40, n_ctx=512, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_head=8,
              d_ff=48, norm="rmsnorm", positions="rotary", gated_ffn=True, activation="silu", attn_bias=False,
              mlp_bias=False, tie_embeddings=False, layer_mixers=("deltanet", "mamba2", "attention"),
              delta_k_heads=2, delta_v_heads=4, delta_d_k=8, delta_d_v=6, ssm_heads=4, ssm_d_head=8, ssm_groups=2,
              ssm_d_state=5, ssm_chunk=16, conv_bias=True)


def hybrid() -> LoadedModel:
    cfg = ModelConfig(**HYBRID)
    model = Transformer(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.1 if name.endswith(("A_log", "dt_bias", "D")) else 1 / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if "norm" in name or "ln" in name else 0.0))
    tokenizer = VocabTokenizer([f"w{i}" for i in range(40)], split="words", name="words")
    return LoadedModel(model, tokenizer, "hybrid", "test", "hybrid")


def test_effective_attention_tiles_equal_the_whole_map():
    loaded = hybrid()
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 40, 100)]
    trace = loaded.trace_ids(ids, CaptureSpec.full())
    for layer in (0, 1):
        whole = trace[f"blocks.{layer}.{EFFECTIVE}"]
        assert whole.shape == (4, 100, 100) == site_shape(loaded.config, EFFECTIVE, 100, layer)
        assert np.all(np.triu(whole, 1) == 0)                          # nothing from later tokens
        tile = effective_block(trace, layer, [1, 3], (70, 90), (10, 75))
        assert np.abs(tile - whole[[1, 3], 70:90, 10:75]).max() <= 1e-6 * max(1.0, np.abs(whole).max())
        assert np.allclose(effective_attention(trace, layer, [2]), whole[2:3], atol=1e-6)
    assert [effective_kind(loaded.config, i) for i in range(3)] == ["Gated DeltaNet", "Mamba-2", None]
    assert head_count(loaded.config, 0) == 4 and head_count(loaded.config, 2) == 4


def test_every_listed_mixer_key_has_its_shape():
    loaded = hybrid()
    trace = loaded.trace_ids(list(range(12)), CaptureSpec.compact())   # re-run from each block's input
    for layer in (0, 1):
        for site in block_sites(loaded.config, layer):
            assert trace[f"blocks.{layer}.{site}"].shape == site_shape(loaded.config, site, 12, layer), site
    assert "blocks.0.attn.q" not in trace and "blocks.2.attn.pattern" in trace


def test_state_norms_and_gates_are_what_the_layer_computed():
    loaded = hybrid()
    trace = loaded.trace_ids(list(range(20)), CaptureSpec.full())
    beta, decay = trace["blocks.0.mixer.beta"], np.exp(trace["blocks.0.mixer.log_decay"])
    assert np.all((beta > 0) & (beta < 1)) and np.all((decay > 0) & (decay <= 1))
    assert np.all(trace["blocks.1.mixer.dt"] > 0)
    # the state's norm after each token, from the step form run token by token
    q = torch.tensor(trace["blocks.0.mixer.q"])[None].repeat_interleave(2, 1) * 8 ** -0.5
    k = torch.tensor(trace["blocks.0.mixer.k"])[None].repeat_interleave(2, 1)
    v = torch.tensor(trace["blocks.0.mixer.v"])[None]
    g, b = torch.tensor(trace["blocks.0.mixer.log_decay"])[None], torch.tensor(trace["blocks.0.mixer.beta"])[None]
    _, _, norms = deltanet.recurrent(q, k, v, g, b, norms=True)
    assert np.allclose(norms[0].numpy(), trace["blocks.0.mixer.state_norm"], rtol=1e-4, atol=1e-5)


def test_the_panels_one_call_gives_attention_or_effective_weights():
    from explorer.core.analysis import attention_tiles
    from explorer.core.analysis.effective_tiles import (
        layer_title,
        maps,
        weights_block,
        weights_overview,
        weights_row,
        weights_statistic,
    )

    loaded = hybrid()
    ids = [5, 6, 7, 5, 6, 7, 5, 6, 7, 1, 2, 3] * 25                      # 300 tokens: more than one row block
    trace = loaded.trace_ids(ids, CaptureSpec.full())
    cfg = loaded.config
    assert layer_title(cfg, 0) == "layer 0: Gated DeltaNet, effective attention"
    assert layer_title(cfg, 2) == "layer 2: full attention" and maps(cfg, 1) == 4
    whole = effective_attention(trace, 1, [2])[0]
    assert np.allclose(weights_block(trace, 1, 2, (250, 300), (0, 300)), whole[250:300], atol=1e-6)
    assert np.allclose(weights_row(trace, 1, 2, 299), whole[299], atol=1e-6)
    image, factor = weights_overview(trace, 1, 2, pixels=64, pool="max")
    assert factor == 5 and image.shape == (60, 60)
    assert np.isclose(image[59, 0], np.abs(whole[295:300, 0:5]).max(), atol=1e-6)
    share = np.abs(whole) / np.abs(whole).sum(-1, keepdims=True)
    assert np.isclose(weights_statistic(trace, 1, 2, "previous_token"), np.mean([share[i, i - 1] for i in range(1, 300)]))
    assert np.allclose(weights_row(trace, 2, 1, 40), attention_tiles.query_row(trace, 2, 1, "pattern", 40))
    assert weights_statistic(trace, 2, 1, "entropy") == attention_tiles.head_statistic(trace, 2, 1, "entropy")
