"""Models the benchmarks share, built in memory (random weights, no files, no downloads)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def gpt2_small_pair():
    """(transformers' GPT2LMHeadModel(GPT2Config()), our Transformer) on the same random weights: 124M parameters."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from explorer.core.checkpoint.gpt2 import convert_gpt2, gpt2_config
    from explorer.core.checkpoint.safe_io import assign_weights
    from explorer.core.model import Transformer

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config()).eval()
    cfg = gpt2_config(hf.config.to_dict())
    ours = Transformer(cfg)
    assign_weights(ours, convert_gpt2(dict(hf.state_dict()), cfg), "GPT2LMHeadModel(GPT2Config())")
    return hf, ours.eval()


def gpt2_small_loaded():
    """Our GPT-2-small-shaped random model as a LoadedModel with GPT-2's tokenizer."""
    from explorer.core.loaded import LoadedModel
    from explorer.core.tokenize.base import gpt2_tokenizer

    _, ours = gpt2_small_pair()
    return LoadedModel(ours, gpt2_tokenizer(), "gpt2-small-shaped (random)", "benchmark", "gpt2")


def default_or_stand_in():
    """The bundled default model, or (before it is trained) a random model of its recipe's shape."""
    from explorer.core.checkpoint import default_model_name, load_checkpoint
    from explorer.core.loaded import LoadedModel

    name = default_model_name()
    if name != "worked-example":
        return load_checkpoint(device="cpu"), f"{name} (bundled)"
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import VocabTokenizer
    from explorer.core.training.recipes import RECIPES

    cfg = RECIPES["shakespeare"].config
    torch.manual_seed(0)
    words = [f"w{i}" for i in range(cfg.vocab_size)]
    loaded = LoadedModel(Transformer(cfg).eval(), VocabTokenizer(words, "words", "stand-in words"),
                         "shakespeare-shaped (random)", "benchmark", cfg.arch)
    return loaded, "random stand-in with the shakespeare recipe's shape (models/shakespeare not trained yet)"


def llama_1b_loaded(device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A Llama-3.2-1B-shaped random model (16 layers, d_model 2048, 32 query / 8 K/V heads, SwiGLU
    8192, vocabulary 128,256, tied embeddings, rotary base 500,000), built in memory, with a stand-in
    word tokenizer of the same vocabulary size (w0 w1 ...)."""
    from explorer.core.config import ModelConfig
    from explorer.core.loaded import LoadedModel
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import VocabTokenizer

    cfg = ModelConfig(arch="llama", vocab_size=128256, n_ctx=4096, d_model=2048, n_layers=16, n_heads=32,
                      d_head=64, d_ff=8192, n_kv_heads=8, norm="rmsnorm", positions="rotary",
                      rotary_base=500000.0, activation="silu", gated_ffn=True, attn_bias=False, mlp_bias=False,
                      tie_embeddings=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = Transformer(cfg).to(dtype).eval()
    words = [f"w{i}" for i in range(cfg.vocab_size)]
    return LoadedModel(model, VocabTokenizer(words, "words", "stand-in words"), "llama-3.2-1b-shaped (random)",
                       "benchmark", "llama")
