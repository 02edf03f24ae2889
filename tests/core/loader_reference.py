"""Building small random Llama, Mistral and GPT-NeoX references, comparing our loaded copy with them, and
training byte-level BPE tokenizer.json files to read (shared by test_family_llama.py, test_family_neox.py,
test_format_nanogpt.py and test_checkpoint_tokenizers.py).

Each architecture is built with ``transformers`` (small, random, eager attention) and compared on
logits, every layer's attention pattern, the hidden states, and ten greedy tokens.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from explorer.core.model import KVCache
from explorer.core.trace import CaptureSpec

TOL = 1e-4


VOCAB = 300


IDS = [5, 17, 99, 3, 250, 42, 42, 7, 131, 64, 200, 11, 9, 77]


TEXTS = ["Hello world", "  leading spaces and   runs   of them\n\n\ttabs", "Numbers 12345 and 3.14159, 2024!",
         "Café naïve résumé — ünïcödé ✓ 🦜 日本語", "don't I'll we've they're", "<|endoftext|>after special",
         "x" * 40, "", " ", "a\r\nb\rc", "ﬁ ligature and e\u0301 combining"]


def spread_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Re-draw the random weights at unit scale: transformers' 0.02 init gives near-tied logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                centre = 1.0 if ("norm" in name or ".ln_" in name) and name.endswith("weight") else 0.0
                p.copy_(centre + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                std = 1.0 if any(e in name for e in ("embed", "wte", "wpe")) else 1.0 / math.sqrt(p.shape[-1])
                p.copy_(std * torch.randn(p.shape, generator=gen))


SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
             max_position_embeddings=64, attn_implementation="eager")


def build(kind: str, **overrides):
    import transformers as T
    classes = {"llama": (T.LlamaConfig, T.LlamaForCausalLM), "mistral": (T.MistralConfig, T.MistralForCausalLM),
               "gpt_neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM)}
    config_cls, model_cls = classes[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**{**SMALL, **overrides})).eval()
    spread_weights(model)
    return model


def reference(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)


def greedy_ours(loaded, ids, steps=10, use_cache=False):
    model, ids, out = loaded.model, list(ids), []
    cache = KVCache(model.cfg.n_layers) if use_cache else None
    feed = ids
    with torch.inference_mode():
        for _ in range(steps):
            logits = model(torch.tensor([feed]), cache=cache)
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
            feed = [nxt] if use_cache else ids
    return out


def greedy_reference(model, ids, steps=10):
    ids, out = list(ids), []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


def compare(loaded, model, ids=IDS) -> dict[str, float]:
    """Max abs differences from the reference; asserts each is under TOL and greedy tokens agree."""
    ref = reference(model, ids)
    L = loaded.config.n_layers
    full = loaded.trace_ids(ids, CaptureSpec.everything())
    compact = loaded.trace_ids(ids, CaptureSpec.compact())  # patterns derived from q and k
    diffs = {"logits": float(np.abs(full["logits"] - ref.logits[0].numpy()).max())}
    diffs["pattern"] = max(float(np.abs(full[f"blocks.{i}.attn.pattern"] - ref.attentions[i][0].numpy()).max())
                           for i in range(L))
    diffs["derived pattern"] = max(
        float(np.abs(compact.head(i, h) - ref.attentions[i][0, h].numpy()).max())
        for i in range(L) for h in range(loaded.config.n_heads))
    diffs["hidden"] = max(float(np.abs(full[f"blocks.{i}.resid_pre"] - ref.hidden_states[i][0].numpy()).max())
                          for i in range(L))
    # transformers' last hidden state is after the final norm; our resid_final is before it
    with torch.no_grad():
        normed = loaded.model.ln_final(torch.from_numpy(np.array(full["resid_final"])))
    diffs["final hidden"] = float(np.abs(normed.numpy() - ref.hidden_states[L][0].numpy()).max())
    diffs["derived logits"] = float(np.abs(compact["logits"] - ref.logits[0].numpy()).max())
    for key, value in diffs.items():
        assert value < TOL, (key, value)
    assert float(ref.logits.abs().max()) > 1.0  # the comparison is not between near-zero numbers
    expected = greedy_reference(model, ids)
    assert greedy_ours(loaded, ids) == expected
    assert greedy_ours(loaded, ids, use_cache=True) == expected
    return diffs


CORPUS = ["The quick brown fox jumps over the lazy dog. " * 3, "Hello world! Hello there, world.",
          "numbers 1234567890 and 42 and 3.14", "  indented\n    code()\n\tand tabs",
          "Café naïve résumé ünïcödé", "don't won't I'll we've", "日本語のテキスト"] * 4


def train_tokenizer(style: str):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    specials = ["<|endoftext|>", "<|padding|>"]
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif style == "llama3":
        pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    elif style == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
    elif style == "pythia":  # NFC, and runs of spaces as added (non-special) tokens
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif style == "prefix":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 20, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    if style == "pythia":
        tok.add_tokens(["    ", "  "])
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    return tok
