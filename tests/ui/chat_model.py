"""Tiny random chat models for the window's conversation tests and screenshots: a Llama from ``transformers``'
config class over a family's tiny tokenizer with its real chat template (``tests/chat_files.py``), saved as a
Hugging Face directory. ``rig`` swaps output rows so that the greedy reply emits chosen tokens at chosen steps
(the end of the turn, a reasoning model's ``</think>``), the way ``tests/core/test_chat_generate.py`` does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_files import write_family  # noqa: E402

STARTER = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
           {"role": "user", "content": "What is the capital of France?"}]


def _greedy(model: Any, ids: list[int], n: int) -> list[int]:
    import torch

    x = torch.tensor([ids])
    with torch.no_grad():  # the mask given: a prompt starting with the pad id must not be masked
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def build_chat_model(directory: Path, family: str = "qwen3", messages: list[dict[str, str]] | None = None,
                     emits: tuple[tuple[str, int], ...] = (("eos", 3),), size: dict[str, int] | None = None,
                     std: float = 0.5, **template_options: Any) -> dict[str, Any]:
    """Write the model; its greedy reply to ``messages`` (default ``STARTER``, rendered with the generation
    prompt and ``template_options``) emits each token of ``emits`` ((token text or "eos", step)) at its step.
    ``std``: the spread of the random weights. Returns the directory, the templated ids, the reply's ids and the
    end-of-turn id."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    write_family(family, directory)
    tok = AutoTokenizer.from_pretrained(str(directory))
    end = tok.convert_tokens_to_ids(tok.eos_token)
    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)
    shape.update(size or {})
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), max_position_embeddings=512, tie_word_embeddings=False,
                                         attn_implementation="eager", eos_token_id=end, **shape)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std if p.dim() > 1 else 0.1).add_(1.0 if p.dim() == 1 else 0.0)
    ids = tok.apply_chat_template(messages or STARTER, add_generation_prompt=True, tokenize=True,
                                  **template_options)["input_ids"]
    for text, step in emits:
        wanted = end if text == "eos" else tok.convert_tokens_to_ids(text)
        out = _greedy(model, ids, step + 1)
        chosen = out[step]
        if chosen != wanted:
            assert wanted not in out[:step] and chosen not in out[:step], "the rigged token comes earlier"
            with torch.no_grad():  # the wanted token takes the place of the token chosen at that step
                w = model.lm_head.weight
                w[[wanted, chosen]] = w[[chosen, wanted]]
    reply = _greedy(model, ids, 24)
    model.generation_config = GenerationConfig(eos_token_id=[end], do_sample=False)
    model.save_pretrained(str(directory))
    return {"directory": directory, "ids": ids, "reply": reply, "end": end, "tokenizer": tok}
