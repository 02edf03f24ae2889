"""Building tiny random Hugging Face decoders and checking our loaded copy against them.

``build`` makes a transformers model from its Config class with tiny sizes and re-draws its
weights at unit scale (transformers' 0.02 init gives near-tied logits, which would make greedy
tokens a coin toss); ``check`` compares logits, every layer's attention pattern (stored and
derived from q and k), the residual stream and greedy generation.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.generation.generate import generate
from explorer.core.generation.sampling import SamplingParams
from explorer.core.trace import CaptureSpec

TOL = 1e-4
VOCAB = 100
IDS = [5, 17, 99, 3, 50, 42, 42, 7, 31, 64, 20, 11, 9, 77]  # 14 tokens: longer than the test windows
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
             max_position_embeddings=64, attn_implementation="eager")


def spread_weights(model: torch.nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm = "norm" in name or ".ln_" in name or ".ln_f." in name  # GPT-2-style names: ln_1, ln_f
            if p.dim() == 1 or is_norm:
                centre = 1.0 if is_norm and name.endswith("weight") else 0.0
                p.copy_(centre + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 1.0 if "embed" in name or name.endswith(("wte.weight", "wpe.weight")) else 1.0 / math.sqrt(p.shape[-1])
                p.copy_(std * torch.randn(p.shape, generator=gen))


def build(config_name: str, model_name: str, **overrides):
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**{**SMALL, **overrides})
    model = getattr(transformers, model_name)(config).eval()
    spread_weights(model)
    return model


def save_and_open(model, path, **kwargs):
    model.save_pretrained(path)
    return load_checkpoint(path, device="cpu", **kwargs)


def reference_greedy(model, ids, steps):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=steps, min_new_tokens=steps, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(ids):].tolist()


def ours_greedy(loaded, ids, steps, use_cache=True):
    params = SamplingParams(temperature=0.0, max_new_tokens=steps, stop_at_eos=False)
    return generate(loaded, list(ids), params, use_cache=use_cache).token_ids


def _finite_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Max abs difference; -inf (masked) entries must coincide."""
    assert np.array_equal(np.isneginf(a), np.isneginf(b))
    finite = np.isfinite(a)
    return float(np.abs(a[finite] - b[finite]).max())


def check(loaded, model, ids=IDS, steps=6, tol=TOL, final_norm: bool = True,
          without_cache: bool = True) -> dict[str, float]:
    """Max abs differences from the reference; asserts each is under ``tol`` and greedy tokens agree.

    ``final_norm``: transformers' last hidden state is after the final norm, ours (resid_final) before.
    """
    with torch.no_grad():
        ref = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    L, H = loaded.config.n_layers, loaded.config.n_heads
    full = loaded.trace_ids(ids, CaptureSpec.everything())
    compact = loaded.trace_ids(ids, CaptureSpec.compact())  # scores and patterns derived from q and k
    diffs = {"logits": float(np.abs(full["logits"] - ref.logits[0].numpy()).max())}
    diffs["pattern"] = max(float(np.abs(full[f"blocks.{i}.attn.pattern"] - ref.attentions[i][0].numpy()).max())
                           for i in range(L))
    diffs["derived pattern"] = max(float(np.abs(compact.head(i, h) - ref.attentions[i][0, h].numpy()).max())
                                   for i in range(L) for h in range(H))
    diffs["derived scores"] = max(_finite_diff(compact.head(i, h, "scores"), full[f"blocks.{i}.attn.scores"][h])
                                  for i in range(L) for h in range(H))
    diffs["hidden"] = max(float(np.abs(full[f"blocks.{i}.resid_pre"] - ref.hidden_states[i][0].numpy()).max())
                          for i in range(L))
    final = torch.from_numpy(np.array(full["resid_final"]))
    with torch.no_grad():
        final = loaded.model.ln_final(final) if final_norm and loaded.model.ln_final is not None else final
        if loaded.model.project_out is not None:  # OPT-350m reports its last hidden state projected out
            final = loaded.model.project_out(final)
    diffs["final hidden"] = float(np.abs(final.numpy() - ref.hidden_states[L][0].numpy()).max())
    diffs["derived logits"] = float(np.abs(compact["logits"] - ref.logits[0].numpy()).max())
    # block internals the compact trace did not store are re-run from resid_pre (mask, bias, rotary and all)
    diffs["re-run block"] = max(float(np.abs(compact[f"blocks.{i}.{key}"] - full[f"blocks.{i}.{key}"]).max())
                                for i in range(L) for key in ("attn.z", "attn.out", "resid_mid"))
    for key, value in diffs.items():
        assert value < tol, (key, value)
    assert float(ref.logits.abs().max()) > 0.5  # the comparison is not between near-zero numbers
    # the masked entries agree too: -inf in ours exactly where the reference pattern is 0 by the mask
    # (or, with large unscaled scores such as GPT-Neo's, where a tiny weight underflows to 0 there too)
    for i in range(L):
        masked, theirs = np.isneginf(full[f"blocks.{i}.attn.scores"]), ref.attentions[i][0].numpy()
        assert (theirs[masked] == 0).all() and not masked[theirs > 0].any()
    expected = reference_greedy(model, ids, steps)
    assert ours_greedy(loaded, ids, steps) == expected
    if without_cache:
        assert ours_greedy(loaded, ids, steps, use_cache=False) == expected
    return diffs


def build_saved(config_name: str, model_name: str, path, **overrides):
    """A tiny random transformers model saved to ``path`` with save_pretrained: (model, path)."""
    model = build(config_name, model_name, **overrides)
    model.save_pretrained(path)
    return model, path


def compare(loaded, model, ids=IDS) -> dict[str, float]:
    return check(loaded, model, ids)


def score_difference(derived: np.ndarray, stored: np.ndarray) -> float:
    """Max abs difference of two score matrices whose masked (-inf) entries must coincide."""
    assert np.array_equal(np.isinf(derived), np.isinf(stored))
    finite = np.isfinite(stored)
    return float(np.abs(derived[finite] - stored[finite]).max())


# Gemma 2 with every switch it has: sandwich norms, both soft caps, a sliding window on every other layer
GEMMA2 = dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
              attn_logit_softcapping=2.0, final_logit_softcapping=30.0)
