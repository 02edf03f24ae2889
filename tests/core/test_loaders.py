"""Llama, Mistral, GPT-NeoX and nanoGPT checkpoints against their reference implementations.

Each architecture is built with ``transformers`` (small, random, eager attention), saved the way
people save them, loaded with our loader, and compared: logits, every layer's attention pattern,
the hidden states, and ten greedy tokens. Tokenizers read from ``tokenizer.json`` are compared
with the ``tokenizers`` library on the same text.
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.core.checkpoint import load_checkpoint, supported_formats
from explorer.core.errors import CheckpointError, TokenizerError
from explorer.core.model import KVCache
from explorer.core.trace import CaptureSpec

TOL = 1e-4
VOCAB = 300
IDS = [5, 17, 99, 3, 250, 42, 42, 7, 131, 64, 200, 11, 9, 77]
TEXTS = ["Hello world", "  leading spaces and   runs   of them\n\n\ttabs", "Numbers 12345 and 3.14159, 2024!",
         "Café naïve résumé — ünïcödé ✓ 🦜 日本語", "don't I'll we've they're", "<|endoftext|>after special",
         "x" * 40, "", " ", "a\r\nb\rc", "ﬁ ligature and e\u0301 combining"]

transformers = pytest.importorskip("transformers")


# --- building references ---------------------------------------------------------------------

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
    T = transformers
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


# --- Llama -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    model = build("llama", num_key_value_heads=2, rope_theta=500.0)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    return path, model


def test_llama_with_gqa_matches_reference(llama):
    path, model = llama
    loaded = load_checkpoint(path, device="cpu")
    cfg = loaded.config
    assert loaded.arch == "llama" and loaded.info()["architecture"] == "llama"
    assert (cfg.n_heads, cfg.kv_heads, cfg.norm, cfg.positions, cfg.gated_ffn, cfg.activation) == \
        (4, 2, "rmsnorm", "rotary", True, "silu")
    assert cfg.rotary_base == 500.0 and not cfg.tie_embeddings and not cfg.attn_bias
    compare(loaded, model)


def test_llama_sharded_safetensors(llama, tmp_path):
    _, model = llama
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    compare(load_checkpoint(tmp_path, device="cpu"), model)


def test_llama_pytorch_model_bin(llama, tmp_path):
    _, model = llama
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    compare(load_checkpoint(tmp_path / "pytorch_model.bin", device="cpu"), model)  # a file in the directory


def test_llama_head_dim_biases_and_tied_embeddings(tmp_path):
    model = build("llama", num_key_value_heads=1, head_dim=16, attention_bias=True, mlp_bias=True,
                  tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.d_head == 16 and loaded.config.kv_heads == 1 and loaded.config.tie_embeddings
    assert loaded.model.unembed.weight is loaded.model.embed.weight
    compare(loaded, model)


def test_llama_incomplete_rope_scaling_is_refused_clearly(llama, tmp_path):
    path, _ = llama  # llama3 scaling itself is tested in test_rope_scaling.py
    config = json.loads((path / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="RoPE scaling 'llama3' needs a positive number low_freq_factor"):
        load_checkpoint(tmp_path)


# --- Mistral -----------------------------------------------------------------------------------

def test_mistral_matches_reference_with_its_sliding_window(tmp_path):
    model = build("mistral", num_key_value_heads=2, sliding_window=5)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.arch == "mistral" and loaded.config.n_ctx == 64 and loaded.config.sliding_window == 5
    assert loaded.config.sliding_layers == (0, 1, 2)
    assert any("sliding window" in note for note in loaded.notes)
    assert "sliding window" in loaded.info()["notes"]
    compare(loaded, model)  # 14 prompt + 10 generated tokens: the window of 5 matters


def test_mistral_without_window(tmp_path):
    model = build("mistral", num_key_value_heads=4, sliding_window=None)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.n_ctx == 64 and not any("sliding" in note for note in loaded.notes)
    compare(loaded, model)


# --- GPT-NeoX ----------------------------------------------------------------------------------

@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_partial_rotary_matches_reference(tmp_path, parallel):
    model = build("gpt_neox", hidden_size=64, rotary_pct=0.25, rotary_emb_base=1000,
                  use_parallel_residual=parallel)
    model.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, device="cpu")
    cfg = loaded.config
    assert loaded.arch == "gpt-neox" and cfg.parallel_residual is parallel
    assert (cfg.d_head, cfg.rotary_dim, cfg.rotary_base, cfg.norm) == (16, 4, 1000.0, "layernorm")
    compare(loaded, model)


def test_gpt_neox_old_names_in_pytorch_model_bin(tmp_path):
    """Pythia's files: ``embed_out`` for the un-embedding, mask buffers and inv_freq beside the weights."""
    model = build("gpt_neox", rotary_pct=0.5)
    config = model.config.to_dict()
    params = config.pop("rope_parameters")  # written the way transformers 4 wrote it
    config.update(rotary_pct=params["partial_rotary_factor"], rotary_emb_base=params["rope_theta"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    state = dict(model.state_dict())
    if "lm_head.weight" in state:  # transformers before 5.13 names it embed_out already
        state["embed_out.weight"] = state.pop("lm_head.weight")
    assert "embed_out.weight" in state and "lm_head.weight" not in state
    for i in range(3):
        state[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(1, 1, 64, 64, dtype=torch.bool).tril()
        state[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        state[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = torch.ones(2)
    torch.save(state, tmp_path / "pytorch_model.bin")
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.rotary_dim == 4
    compare(loaded, model)


# --- nanoGPT -----------------------------------------------------------------------------------

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


# --- tokenizers from tokenizer.json ------------------------------------------------------------

tokenizers = pytest.importorskip("tokenizers")
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


@pytest.fixture(scope="module", params=["gpt2", "llama3", "smollm", "pythia", "prefix"])
def trained(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tok-{request.param}")
    tok = train_tokenizer(request.param)
    tok.save(str(path / "tokenizer.json"))
    from explorer.core.tokenize.huggingface import tokenizer_from_json

    return request.param, tok, tokenizer_from_json(path / "tokenizer.json")


def test_byte_level_tokenizer_json_matches_tokenizers(trained):
    style, reference_tok, ours = trained
    for text in TEXTS + CORPUS[:7]:
        assert ours.encode(text) == reference_tok.encode(text).ids, text
        if style not in ("prefix", "pythia"):  # those add a space / normalize
            assert ours.decode(ours.encode(text)).replace("<|begin_of_text|>", "") == text


PIECES = list("ab 1\n\t.'éü日\u0301") + ["  ", "<|endoftext|>", "    ", "<|padding|>", "The", " quick", "123"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16).map("".join) | st.text(max_size=20))
def test_byte_level_tokenizer_json_matches_tokenizers_on_any_text(trained, text):
    _, reference_tok, ours = trained
    assert ours.encode(text) == reference_tok.encode(text).ids


def test_ids_out_of_merge_order_are_read_as_tokenizers_reads_them(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_from_json

    data = json.loads(train_tokenizer("gpt2").to_str())
    vocab = data["model"]["vocab"]
    first, second = ("".join(m) if isinstance(m, list) else m.replace(" ", "") for m in data["model"]["merges"][:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    reference_tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ours = tokenizer_from_json(tmp_path / "tokenizer.json")
    for text in TEXTS:
        assert ours.encode(text) == reference_tok.encode(text).ids


def test_llama_with_llama3_style_tokenizer_runs_on_text(llama, tmp_path):
    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tok = train_tokenizer("llama3")
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.notes == [] and loaded.tokenizer.name == f"{tmp_path.name} tokenizer"
    ids = loaded.tokenizer.encode("Hello world, 12345")
    assert ids == tok.encode("Hello world, 12345").ids and ids[0] == tok.token_to_id("<|begin_of_text|>")
    trace = loaded.trace("Hello world, 12345")
    assert trace.tokens[0] == "<|begin_of_text|>"
    assert np.abs(trace["logits"] - reference(model, ids).logits[0].numpy()).max() < TOL


def test_sentencepiece_style_tokenizer_json_is_read(llama, tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.decoder = decoders.Metaspace()
    sp.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"],
                                                        show_progress=False))
    sp.save(str(tmp_path / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.notes == [] and loaded.tokenizer.encode("Hello world") == sp.encode("Hello world").ids
    ids = loaded.tokenizer.encode("Hello world")
    assert "".join(loaded.tokenizer.displays(ids)) == " Hello world"  # ▁ shown as the space it stands for
    compare(loaded, model, ids)


def test_unreadable_tokenizer_falls_back_to_token_ids_with_a_note(llama, tmp_path):
    path, model = llama
    for f in path.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x00")
    loaded = load_checkpoint(tmp_path, device="cpu")
    assert len(loaded.notes) == 1 and "tokenizer.model is a SentencePiece Unigram model" in loaded.notes[0]
    assert loaded.tokenizer.encode("1 250, 12") == [1, 250, 12]
    assert loaded.tokenizer.displays([1, 250]) == ["[1]", "[250]"]
    with pytest.raises(TokenizerError, match="token ids separated by spaces"):
        loaded.tokenizer.encode("Hello")
    with pytest.raises(TokenizerError, match="0..299"):
        loaded.tokenizer.encode("5 300")
    compare(loaded, model)
    (tmp_path / "tokenizer.model").write_bytes(b"\xff" * 9)
    assert "tokenizer.model is not a SentencePiece model" in load_checkpoint(tmp_path, device="cpu").notes[0]


def test_tokenizer_larger_than_the_model_is_an_error(tmp_path):
    model = build("gpt_neox", vocab_size=100)
    model.save_pretrained(tmp_path)
    train_tokenizer("gpt2").save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="tokens but the model only 100"):
        load_checkpoint(tmp_path)


def test_supported_formats_name_the_new_architectures():
    text = supported_formats()
    for name in ("'llama'", "'mistral'", "'gpt_neox'", "'gpt2'", "nanoGPT"):
        assert name in text


def test_a_plain_byte_level_tokenizer_survives_a_native_round_trip(tmp_path):
    from explorer.core.checkpoint import save_native

    model = build("gpt_neox")
    model.save_pretrained(tmp_path / "hf")
    tok = train_tokenizer("gpt2")
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    loaded = load_checkpoint(tmp_path / "hf", device="cpu")
    assert loaded.tokenizer.describe()["type"] == "hf-tokenizer-json"
    save_native(loaded.model, loaded.tokenizer, tmp_path / "native")
    again = load_checkpoint(tmp_path / "native", device="cpu")
    for text in TEXTS:
        assert again.tokenizer.encode(text) == tok.encode(text).ids
    assert np.array_equal(again.trace("Hello world")["logits"], loaded.trace("Hello world")["logits"])


def test_vocab_json_and_merges_txt(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_for_checkpoint

    tok = train_tokenizer("gpt2")
    tok.model.save(str(tmp_path))  # vocab.json + merges.txt
    ours, notes = tokenizer_for_checkpoint(tmp_path, VOCAB)
    assert notes == []
    for text in TEXTS:
        assert ours.encode(text) == tok.encode(text).ids


def test_gpt2_files_read_by_tokenizers_equal_tiktoken_gpt2(tmp_path):
    from explorer.core.tokenize.huggingface import tokenizer_from_vocab_merges
    from explorer.core.tokenize.base import gpt2_tokenizer

    from gpt2_files import write_gpt2_files  # tests/gpt2_files.py

    encoder_json, vocab_bpe = write_gpt2_files(tmp_path)
    ours, reference_tok = tokenizer_from_vocab_merges(encoder_json, vocab_bpe, "gpt2-files"), gpt2_tokenizer()
    assert ours.vocab_size == 50257 and ours.eos_id is None
    for text in TEXTS + ["<|endoftext|>Café 🦜"]:
        ids = ours.encode(text)
        assert ids == reference_tok.encode(text)
        assert ours.displays(ids) == reference_tok.displays(ids)
