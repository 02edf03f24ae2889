"""What the families' switches share, checked across families: compact traces re-derive every stored
value and their sizes are known in advance, the config survives JSON, a neuron's vocabulary effect
folds the final norm's gain, the scores formula names each rule, the supported formats name each family.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from decoder_reference import GEMMA2, IDS, build, save_and_open

from explorer.core.checkpoint import supported_formats
from explorer.core.errors import CheckpointError
from explorer.core.trace import CaptureSpec

pytest.importorskip("transformers")


FAMILIES = {
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", GEMMA2),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {"num_key_value_heads": 2}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"qk_layernorm": True, "use_qkv_bias": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 16}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"residual_multiplier": 0.5, "attention_multiplier": 0.1}),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_compact_traces_rederive_everything_and_sizes_are_known(tmp_path, family):
    from explorer.core.trace import KINDS, estimate_nbytes

    config_name, model_name, overrides = FAMILIES[family]
    loaded = save_and_open(build(config_name, model_name, **overrides), tmp_path)
    full = loaded.trace_ids(IDS, CaptureSpec.everything())
    compact = loaded.trace_ids(IDS, CaptureSpec.compact())
    assert set(full.stored_keys()) <= set(compact.keys())
    for key in full.stored_keys():  # stored by the forward pass = derived from the compact trace
        np.testing.assert_allclose(compact[key], full[key], atol=1e-5, rtol=0, err_msg=key)
    for spec in (CaptureSpec.full(), CaptureSpec.compact(), CaptureSpec(kinds=frozenset(KINDS), dtype="float16")):
        trace = loaded.trace_ids(IDS, spec)
        assert estimate_nbytes(loaded.config, len(IDS), spec) == trace.nbytes - trace.token_ids.nbytes


def test_new_switches_survive_a_json_round_trip(tmp_path):
    """The native format stores ModelConfig as JSON: tuples (sliding layers, RoPE scaling) come back equal."""
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer

    loaded = save_and_open(build("Gemma3TextConfig", "Gemma3ForCausalLM", num_hidden_layers=3, head_dim=16,
                                 sliding_window=4, rope_parameters={
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                     "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}},
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
                           tmp_path)
    again = ModelConfig.from_dict(json.loads(loaded.config.to_json()))
    assert again == loaded.config and hash(again) == hash(loaded.config)
    assert again.rope == {"rope_type": "linear", "factor": 2.0} and again.sliding_layers == (0, 1)
    model = Transformer(again).eval()
    model.load_state_dict(loaded.model.state_dict())
    with torch.no_grad():
        np.testing.assert_array_equal(model(torch.tensor([IDS]))[0].numpy(),
                                      loaded.trace_ids(IDS, CaptureSpec.compact())["logits"])


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


@pytest.mark.parametrize("family", ["gemma", "olmo"])
def test_a_neurons_vocabulary_effect_folds_the_final_norms_own_gain(tmp_path, family):
    """Gemma's final norm multiplies by (1 + w); OLMo's has no weight at all."""
    from explorer.core.analysis.neurons import neuron_vocab_effect

    names = {"gemma": ("GemmaConfig", "GemmaForCausalLM"), "olmo": ("OlmoConfig", "OlmoForCausalLM")}[family]
    loaded = save_and_open(build(*names), tmp_path)
    model = loaded.model
    top, values, _, _ = neuron_vocab_effect(loaded.trace_ids(IDS), 1, 7, k=5)
    direction = model.blocks[1].mlp.W_out.weight[:, 7].detach()
    if family == "gemma":
        direction = direction * (1.0 + model.ln_final.weight.detach())
    expected = (model.unembed.weight.detach() @ direction).numpy()
    np.testing.assert_allclose(values, expected[top], rtol=1e-5, atol=1e-5)
    assert values[0] == pytest.approx(float(expected.max()), rel=1e-5)


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


def test_supported_formats_name_the_new_architectures():
    text = supported_formats()
    for name in ("'llama'", "'mistral'", "'gpt_neox'", "'gpt2'", "nanoGPT"):
        assert name in text
