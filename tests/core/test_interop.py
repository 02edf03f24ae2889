"""The safetensors export under TransformerLens' hook names, reading it back, and in-memory
``transformers`` models converted without files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from explorer.core.checkpoint import load_checkpoint
from explorer.core.checkpoint.in_memory import FAMILIES, from_transformers
from explorer.core.config import ModelConfig
from explorer.core.errors import CheckpointError
from explorer.core.interop import (
    TraceFileError,
    read_trace_safetensors,
    write_trace_safetensors,
)
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.trace import CaptureSpec, Trace

PROMPT = "To be, or not to be, that is the question"


def _tl_expected(trace: Trace) -> dict[str, np.ndarray]:
    """What each TransformerLens name must hold, built here from the Trace independently of the writer."""
    cfg, L = trace.config, trace.config.n_layers
    rot = "rot_" if cfg.positions == "rotary" else ""
    out = {"tokens": trace.token_ids[None], "hook_embed": trace["embed"][None], "logits": trace["logits"][None]}
    if "pos_embed" in trace:
        out["hook_pos_embed"] = trace["pos_embed"][None]
    for layer in range(L):
        b = f"blocks.{layer}."
        out[b + "hook_resid_pre"] = trace[b + "resid_pre"][None]
        out[b + f"attn.hook_{rot}q"] = trace[b + "attn.q"].transpose(1, 0, 2)[None]   # [batch, pos, head, d_head]
        out[b + f"attn.hook_{rot}k"] = trace[b + "attn.k"].transpose(1, 0, 2)[None]
        out[b + "attn.hook_v"] = trace[b + "attn.v"].transpose(1, 0, 2)[None]
        out[b + "attn.hook_z"] = trace[b + "attn.z"].transpose(1, 0, 2)[None]
        out[b + "attn.hook_attn_scores"] = trace[b + "attn.scores"][None]             # [batch, head, query, key]
        out[b + "attn.hook_pattern"] = trace[b + "attn.pattern"][None]
        out[b + "hook_attn_out"] = trace[b + "attn.out"][None]
        out[b + "hook_resid_post"] = (trace[f"blocks.{layer + 1}.resid_pre"] if layer + 1 < L else trace["resid_final"])[None]
        var = trace[b + "ln1.var"].astype(np.float64)
        out[b + "ln1.hook_scale"] = np.sqrt(var + cfg.norm_eps)[None, :, None]
        if cfg.has_ffn:
            out[b + "hook_resid_mid"] = trace[b + "resid_mid"][None]
            out[b + "mlp.hook_pre"] = trace[b + "mlp.pre"][None]
            out[b + "mlp.hook_post"] = trace[b + "mlp.post"][None]
            out[b + "hook_mlp_out"] = trace[b + "mlp.out"][None]
    out["ln_final.hook_scale"] = np.sqrt(trace["ln_final.var"].astype(np.float64) + cfg.norm_eps)[None, :, None]
    return out


@pytest.mark.parametrize("name", ["shakespeare", "induction"])
def test_exported_safetensors_read_in_a_fresh_process_match_the_trace(tmp_path, name):
    loaded = load_checkpoint(name, device="cpu")
    trace = loaded.trace(PROMPT, CaptureSpec.compact())  # most values derived for the export
    path = write_trace_safetensors(trace, tmp_path / "trace.safetensors", prompt=PROMPT)
    script = textwrap.dedent(f"""
        import json, numpy as np
        from safetensors import safe_open
        with safe_open({str(path)!r}, framework="numpy") as f:
            meta = f.metadata()
            arrays = {{k: f.get_tensor(k) for k in f.keys()}}
        np.savez({str(tmp_path / "read.npz")!r}, **arrays)
        print(json.dumps({{"meta": meta, "shapes": {{k: list(v.shape) for k, v in arrays.items()}}}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    read = np.load(tmp_path / "read.npz")
    expected = _tl_expected(trace)
    missing = set(expected) - set(read.files)
    assert not missing, sorted(missing)
    for key, value in expected.items():
        assert report["shapes"][key] == list(value.shape), key
        np.testing.assert_allclose(read[key], value, rtol=0, atol=1e-6, err_msg=key)
    cfg = trace.config
    n = trace.n_tokens
    assert report["shapes"]["blocks.0.attn.hook_pattern"] == [1, cfg.n_heads, n, n]
    assert np.allclose(read["blocks.0.attn.hook_pattern"].sum(-1), 1, atol=1e-5)
    meta = report["meta"]
    assert meta["prompt"] == PROMPT and meta["model_name"] == loaded.name
    assert json.loads(meta["token_ids"]) == trace.token_ids.tolist()
    assert json.loads(meta["tokens"]) == list(trace.tokens)
    assert ModelConfig.from_dict(json.loads(meta["config"])) == cfg
    capture = json.loads(meta["capture"])
    assert capture["stored_kinds"] == sorted(CaptureSpec.compact().kinds) and capture["storage_dtype"] == ["float32"]
    assert ("blocks.0.attn.hook_rot_q" in read.files) == (cfg.positions == "rotary")


def test_a_reopened_trace_equals_the_original_and_says_what_needs_the_model(tmp_path):
    loaded = load_checkpoint("shakespeare", device="cpu")
    trace = loaded.trace(PROMPT)
    reopened = read_trace_safetensors(write_trace_safetensors(trace, tmp_path / "t.safetensors", PROMPT))
    assert not reopened.has_model and trace.has_model
    assert reopened.tokens == trace.tokens and reopened.token_ids.tolist() == trace.token_ids.tolist()
    assert reopened.config == trace.config and reopened.meta.extra["prompt"] == PROMPT
    assert set(reopened.keys()) == set(trace.keys())
    for key in trace.keys():
        np.testing.assert_array_equal(reopened[key], trace[key], err_msg=key)
    for layer in range(trace.config.n_layers):
        np.testing.assert_array_equal(reopened.head(layer, 1), trace.head(layer, 1))
    # a model-less trace with less in it names what only the weights could give
    partial = Trace(trace.token_ids, trace.tokens, trace.config, {"blocks.0.resid_pre": trace["blocks.0.resid_pre"]})
    with pytest.raises(KeyError, match="needs the model's weights"):
        partial["blocks.0.mlp.post"]


def test_foreign_or_damaged_files_are_refused_with_one_line(tmp_path):
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, np.float32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(TraceFileError, match="not a Transformer Explorer trace"):
        read_trace_safetensors(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(TraceFileError, match="cannot read"):
        read_trace_safetensors(tmp_path / "junk.safetensors")


def test_text_from_a_trace_file_is_cut_with_a_note_before_it_is_shown(tmp_path):
    """Issue 34: a 10 MB prompt on one line, a 50 MB model name and a 5,000-character token come back cut (each
    with a note), the numbers and the token count unchanged."""
    import struct

    from safetensors.numpy import load_file, save_file

    loaded = load_checkpoint("shakespeare", device="cpu")
    trace = loaded.trace(PROMPT)
    path = write_trace_safetensors(trace, tmp_path / "t.safetensors", PROMPT)
    with open(path, "rb") as f:
        meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
    tokens = json.loads(meta["tokens"])
    tokens[1] = "t" * 5_000
    hostile = tmp_path / "hostile.safetensors"
    save_file(load_file(str(path)), str(hostile), metadata={**meta, "prompt": "p" * 10_000_000,
                                                            "model_name": "\x1b[2J" + "N" * 50_000_000,
                                                            "tokens": json.dumps(tokens)})
    reopened = read_trace_safetensors(hostile)
    prompt = reopened.meta.extra["prompt"]
    assert prompt.startswith("p" * 10_000) and len(prompt) < 60_000 and "10,000,000" in prompt
    assert len(reopened.meta.model_name) < 200 and "\x1b" not in reopened.meta.model_name
    assert reopened.tokens[1].startswith("t" * 500) and len(reopened.tokens[1]) < 1_100
    assert "5,000 characters" in reopened.tokens[1]
    assert len(reopened.tokens) == len(trace.tokens) and reopened.tokens[2:] == trace.tokens[2:]
    assert len(reopened.meta.extra["notes"]) == 3
    np.testing.assert_array_equal(reopened["logits"], trace["logits"])


# --- in-memory transformers models ----------------------------------------------------------

def _reference_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float().numpy()


def _tiny(family: str):
    import transformers as tf

    torch.manual_seed(0)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=32, vocab_size=20,
                                                attn_implementation="eager"))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=20,
                                                  max_position_embeddings=32, attn_implementation="eager"))
    if family == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=20,
                                                  max_position_embeddings=32, attn_implementation="eager"))
    if family == "gemma2":
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                                    vocab_size=20, max_position_embeddings=32, sliding_window=16,
                                                    attn_implementation="eager"))
    return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                  num_attention_heads=4, vocab_size=20, max_position_embeddings=32,
                                                  rotary_pct=0.5, attn_implementation="eager"))


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox", "qwen2", "gemma2"])
def test_in_memory_transformers_models_match_their_reference(family):
    pytest.importorskip("transformers")
    hf = _tiny(family).eval()
    tok = VocabTokenizer([f"w{i}" for i in range(20)])
    loaded = from_transformers(hf, tok, device="cpu")
    assert loaded.source == "in-memory transformers model" and family in FAMILIES
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    trace = loaded.trace_ids(ids)
    np.testing.assert_allclose(trace["logits"], _reference_logits(hf, ids), atol=1e-4, rtol=0)
    before = {k: v.clone() for k, v in hf.state_dict().items()}
    loaded.model.embed.weight.data.add_(1.0)  # ours is a copy: the notebook's model is untouched
    assert all(torch.equal(before[k], v) for k, v in hf.state_dict().items())


def test_in_memory_refuses_what_it_cannot_convert():
    with pytest.raises(CheckpointError, match="expected a transformers model"):
        from_transformers(object(), None)
    import transformers as tf

    # an encoder-decoder: no family converts it (every model type that opens from a directory does, BERT included)
    t5 = tf.T5Model(tf.T5Config(d_model=32, d_kv=8, d_ff=32, num_layers=1, num_heads=2, vocab_size=20))
    with pytest.raises(CheckpointError, match="not supported"):
        from_transformers(t5, None)


def test_a_transformers_tokenizer_object_is_wrapped_exactly():
    from gpt2_files import transformers_gpt2_tokenizer  # tests/gpt2_files.py

    from explorer.core.checkpoint.in_memory import TransformersTokenizer
    from explorer.core.tokenize.base import gpt2_tokenizer

    ours, theirs = gpt2_tokenizer(), TransformersTokenizer(transformers_gpt2_tokenizer())
    for text in ["Hello world", "naïve café 🦜 <|endoftext|>", "  spaces\n\ttabs"]:
        ids = theirs.encode(text)
        assert ids == ours.encode(text)
        assert [theirs.token_bytes(i) for i in ids] == [ours.token_bytes(i) for i in ids]
        assert theirs.decode(ids) == text
    assert theirs.vocab_size == 50257 and theirs.eos_id == 50256


def test_the_export_command_writes_trace_safetensors_beside_trace_npz(tmp_path):
    from explorer.cli import main

    assert main(["export", "--checkpoint", "induction", "--prompt", PROMPT, "--out", str(tmp_path)]) == 0
    npz = np.load(tmp_path / "trace.npz")
    reopened = read_trace_safetensors(tmp_path / "trace.safetensors")
    assert reopened.meta.extra["prompt"] == PROMPT and reopened.token_ids.tolist() == npz["token_ids"].tolist()
    for layer in range(reopened.config.n_layers):
        np.testing.assert_array_equal(reopened[f"blocks.{layer}.attn.pattern"], npz["attention"][layer])
    np.testing.assert_array_equal(reopened["logits"], npz["logits"])
