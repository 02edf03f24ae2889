"""``transformer-explorer verify``: our model against transformers' eager model from the same files.

Every family in the registry, as a tiny random model saved with save_pretrained (the builders of
test_in_memory_families.py) beside a word-level tokenizer.json both sides read, passes; a model whose
conversion a test breaks on purpose (one transposed query weight) fails, naming that layer; what the
reference cannot read is refused with one line.
"""

from __future__ import annotations

import json

import pytest
import torch
from decoder_reference import IDS, VOCAB
from test_in_memory_families import TINY, tiny

from explorer.cli import main
from explorer.core.checkpoint import FAMILIES, load_checkpoint
from explorer.core.verify import LOGITS_TOL, PATTERN_TOL, VerifyRefused, next_ids_differ, verify_checkpoint

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

# transformers 5 rebuilds a Qwen2 tokenizer as byte-level BPE from tokenizer.json's vocabulary, which
# the word-level toy file does not survive (it encodes nothing; so does the multimodal Qwen3.5 processor): those
# families run from token ids here
REBUILT_TOKENIZERS = {"qwen2", "qwen3_5"}
PROMPT = "w5 w17 w99 w3 w50 w42 w42 w7 w31 w64 w20 w11 w9 w77"


def write_tokenizer(directory) -> None:
    """A word-level tokenizer (w0 .. w99) that our loader and transformers' AutoTokenizer both read."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                                 "unk_token": "w0"}))


def saved(model_type, path):
    model = tiny(model_type)
    model.save_pretrained(path)
    write_tokenizer(path)
    return model


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_every_family_verifies_within_tolerance(tmp_path, model_type):
    assert set(TINY) == set(FAMILIES)
    saved(model_type, tmp_path)
    if model_type in REBUILT_TOKENIZERS:
        report = verify_checkpoint(tmp_path, ids=IDS)
    else:
        report = verify_checkpoint(tmp_path, PROMPT)
        assert report.prompt_ids_equal is True  # transformers' tokenization: the same ids
    assert report.passed, "\n".join(report.lines())
    assert list(report.ids) == IDS
    assert len(report.layers) == load_checkpoint(tmp_path, device="cpu").config.n_layers + 1
    assert report.logits is not None and report.logits <= LOGITS_TOL
    plan = load_checkpoint(tmp_path, device="cpu").config.plan  # (a hybrid's recurrent layers have no pattern)
    assert all((row.pattern is not None) == plan[row.layer].is_attention for row in report.layers[1:])
    assert all(row.pattern <= PATTERN_TOL for row in report.layers[1:] if row.pattern is not None)
    assert report.lines()[-1].endswith("within tolerance")


def test_a_transposed_query_weight_fails_naming_its_layer(tmp_path, capsys):
    saved("llama", tmp_path)
    broken = load_checkpoint(tmp_path, device="cpu")
    with torch.no_grad():  # a conversion that forgot to transpose layer 1's (square) query projection
        weight = broken.model.blocks[1].attn.W_Q.weight
        weight.copy_(weight.T.clone())
    report = verify_checkpoint(tmp_path, PROMPT, _loaded=broken)
    assert not report.passed
    assert report.first_failure.label == "layer 1" and not report.first_failure.pattern_ok
    assert all(row.passed for row in report.layers[:2])  # the embeddings and layer 0 still agree
    assert "first difference at layer 1" in report.lines()[-1]


def test_the_command_exits_0_within_tolerance_and_1_outside_it(tmp_path, capsys, monkeypatch):
    saved("gpt2", tmp_path)
    assert main(["verify", "--checkpoint", str(tmp_path), "--prompt", PROMPT]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split()[:2] for line in out if line.startswith(("embeddings", "layer "))]
    assert rows == [["embeddings", "resid"], ["layer", "0"], ["layer", "1"]]  # one line per layer
    assert out[-1].startswith("logits ") and out[-1].endswith("within tolerance")

    def broken_load(source, **kwargs):  # a conversion that scales layer 0's FFN output weight
        loaded = load_checkpoint(source, **kwargs)
        with torch.no_grad():
            loaded.model.blocks[0].mlp.W_out.weight.mul_(1.5)
        return loaded

    monkeypatch.setattr("explorer.core.checkpoint.load_checkpoint", broken_load)
    assert main(["verify", "--checkpoint", str(tmp_path), "--prompt", PROMPT]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert "FAILED: first difference at layer 0" in last


def test_what_the_reference_cannot_read_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    nano = tmp_path / "nano"
    nano.mkdir()
    (nano / "ckpt.pt").write_bytes(b"")
    for source in ("shakespeare", str(tmp_path / "model.gguf"), str(nano), str(tmp_path / "missing"),
                   "memory:1"):
        with pytest.raises(VerifyRefused):
            verify_checkpoint(source, PROMPT)
        assert main(["verify", "--checkpoint", source, "--prompt", PROMPT]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err


def test_without_transformers_one_line_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    saved("llama", tmp_path)
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # import transformers -> ImportError
    assert main(["verify", "--checkpoint", str(tmp_path), "--prompt", PROMPT]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'transformer-explorer[verify]'" in err[0]


def test_next_token_ids_differ_only_beyond_a_tie_within_the_tolerance():
    import numpy as np

    theirs = np.array([[0.0, 1.0, 1.0 - 1e-5], [3.0, 0.0, 0.0]])
    assert next_ids_differ(np.array([[0.0, 0.0, 1.0], [3.0, 0.0, 0.0]]), theirs) == 0  # a near-tie
    assert next_ids_differ(np.array([[0.0, 0.0, 1.0], [0.0, 3.0, 0.0]]), theirs) == 1


def test_falcon_rw_is_checked_against_the_sdpa_reference_without_patterns(tmp_path):
    """transformers 5's eager Falcon adds ALiBi twice (test_family_falcon.py): its ReferenceMap runs SDPA."""
    from decoder_reference import build

    build("FalconConfig", "FalconForCausalLM", pad_token_id=0, alibi=True, multi_query=False, parallel_attn=False,
          bias=True).save_pretrained(tmp_path)
    write_tokenizer(tmp_path)
    report = verify_checkpoint(tmp_path, PROMPT)
    assert report.passed, "\n".join(report.lines())
    assert all(row.pattern is None for row in report.layers) and "pattern not compared" in report.lines()[-2]
    assert any("ALiBi" in note for note in report.notes)


def test_a_cancelled_check_stops_between_its_steps(tmp_path):
    from explorer.core.cancel import Cancel, Cancelled

    saved("llama", tmp_path)
    cancel = Cancel()
    cancel.set()
    with pytest.raises(Cancelled):
        verify_checkpoint(tmp_path, PROMPT, cancel=cancel)


def test_gpt2_with_its_own_tokenizer_files_compares_the_prompts_ids(tmp_path):
    """A real byte-level BPE (GPT-2's, rebuilt from the shipped ranks) saved by transformers: the prompt's
    ids are transformers' own tokenization, compared with ours."""
    from decoder_reference import build
    from gpt2_files import transformers_gpt2_tokenizer  # tests/gpt2_files.py

    build("GPT2Config", "GPT2LMHeadModel", vocab_size=50257, n_embd=64, n_layer=2, n_head=4,
          n_positions=64).save_pretrained(tmp_path)
    transformers_gpt2_tokenizer().save_pretrained(tmp_path)
    report = verify_checkpoint(tmp_path, "Hello world, this is a check of the tokenizer.")
    assert report.passed, "\n".join(report.lines())
    assert report.prompt_ids_equal is True and report.ids[:4] == (15496, 995, 11, 428)  # "Hello world, this"


def test_a_prompt_transformers_tokenizes_differently_fails_on_the_token_ids(tmp_path, capsys):
    saved("qwen2", tmp_path)  # transformers 5 rebuilds this toy word-level file as a BPE that encodes nothing
    report = verify_checkpoint(tmp_path, PROMPT)
    assert report.prompt_ids_equal is False and report.first_failure is None and not report.passed
    assert main(["verify", "--checkpoint", str(tmp_path), "--prompt", PROMPT]) == 1
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        "prompt ids DIFFER (14 tokens here, 0 in transformers; first at token 0)  top-token ids 0 of 14 differ: "
        "FAILED: the token ids differ")
