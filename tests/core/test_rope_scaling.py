"""RoPE scaling variants on a tiny Llama, against transformers (and the frequencies themselves)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from decoder_reference import IDS, build, check, save_and_open

from explorer.core.rope import inverse_frequencies

SCALINGS = {
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 8.0,
             "beta_slow": 1.0},
    "yarn-mscale": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 12,
                    "mscale": 0.9, "mscale_all_dim": 0.5, "truncate": False},
}


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_llama_rope_scaling_matches_reference(tmp_path, name):
    scaling = {**SCALINGS[name], "rope_theta": 50.0}  # a small base: the scaled band covers real dimensions
    model = build("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, rope_parameters=scaling)
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.rope["rope_type"] == scaling["rope_type"]
    check(loaded, model)


def test_the_scaled_frequencies_differ_from_plain_ones():
    """The tests above would pass for a scaling we silently ignored only if it changed nothing."""
    plain, _ = inverse_frequencies(16, 50.0)
    for name, scaling in SCALINGS.items():
        inv, factor = inverse_frequencies(16, 50.0, {**scaling, "max_position_embeddings": 64})
        assert not torch.equal(inv, plain) or factor != 1.0, name


def test_llama_dynamic_ntk_beyond_the_trained_context(tmp_path):
    """Dynamic NTK: past max_position_embeddings (8 here) the base grows with the sequence's length."""
    model = build("LlamaConfig", "LlamaForCausalLM", max_position_embeddings=8,
                  rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 50.0})
    loaded = save_and_open(model, tmp_path)
    assert loaded.config.n_ctx == 16 and any("Dynamic NTK" in note for note in loaded.notes)
    # rerunning the whole sequence re-rotates old keys with the new length's frequencies, which the
    # cache (like transformers' generate) does not: only the cached generation is the reference's
    check(loaded, model, ids=IDS[:10], steps=5, without_cache=False)
    short, _ = inverse_frequencies(16, 50.0, loaded.config.rope, seq_len=8)
    long, _ = inverse_frequencies(16, 50.0, loaded.config.rope, seq_len=12)
    assert torch.equal(short, inverse_frequencies(16, 50.0)[0]) and not torch.equal(short, long)


def test_llama_32_shaped_config_from_transformers_4(tmp_path):
    """A Llama-3.2 config.json as transformers 4 wrote it: rope_theta and rope_scaling side by side."""
    import json

    scaling = SCALINGS["llama3"]
    model = build("LlamaConfig", "LlamaForCausalLM", rope_parameters={**scaling, "rope_theta": 50.0},
                  tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("rope_parameters")
    config.update(rope_theta=50.0, rope_scaling={k: v for k, v in scaling.items()})
    (tmp_path / "config.json").write_text(json.dumps(config))
    from explorer.core.checkpoint import load_checkpoint

    loaded = load_checkpoint(tmp_path, device="cpu")
    assert loaded.config.rope == {**scaling} and loaded.config.rotary_base == 50.0
    check(loaded, model)


def test_unknown_scaling_is_refused(tmp_path):
    import json

    from explorer.core.checkpoint import load_checkpoint
    from explorer.core.errors import CheckpointError

    model = build("LlamaConfig", "LlamaForCausalLM")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "su", "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="RoPE scaling of type 'su'"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("name", [*sorted(SCALINGS), "dynamic"])
def test_frequencies_equal_transformers_bit_for_bit(name):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "dynamic", "factor": 2.0} if name == "dynamic" else SCALINGS[name]
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64,
                         rope_parameters={**scaling, "rope_theta": 50.0})
    params = {**scaling, "max_position_embeddings": 64}
    for seq_len in (None, 40, 100):
        # in a forward pass transformers gives the length as a tensor (the last position id + 1)
        given = torch.tensor(seq_len) if seq_len is not None and name == "dynamic" else seq_len
        theirs, their_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, None, seq_len=given)
        ours, our_factor = inverse_frequencies(16, 50.0, params, seq_len)
        assert torch.equal(ours, theirs) and our_factor == pytest.approx(their_factor, rel=1e-12), (name, seq_len)


def test_sliding_window_mask_by_its_definition():
    """A query at absolute position p sees keys j with p - W < j <= p; with a cache the queries are the last n."""
    from explorer.core.model import causal_mask

    for n, m, window in ((5, 5, 2), (1, 9, 4), (3, 8, 3), (6, 6, 10)):
        mask = causal_mask(n, m, window=window)
        for i in range(n):
            p = m - n + i
            for j in range(m):
                assert bool(mask[i, j]) == (not p - window < j <= p), (n, m, window, i, j)
