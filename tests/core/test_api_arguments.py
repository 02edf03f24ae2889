"""Issue 34: the Python API (explorer.core) given an argument of the wrong type or value raises one
ExplorerError line naming the argument, never an AttributeError from deep inside or an internal error."""

from __future__ import annotations

import pytest

import explorer.core as api
from explorer.core.errors import ExplorerError, InternalError


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from explorer.core.config import ModelConfig
    from explorer.core.model import Transformer
    from explorer.core.tokenize.base import VocabTokenizer

    path = tmp_path_factory.mktemp("api") / "native"
    cfg = ModelConfig(vocab_size=16, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_head=4, d_ff=16)
    api.save_native(Transformer(cfg), VocabTokenizer(list("abcdefghijklmnop"), split="chars"), path)
    return api.load_checkpoint(path, device="cpu")


CALLS = {  # what the call names in its message: the argument
    "load_checkpoint(progress=5)": (lambda m: api.load_checkpoint("worked-example", progress=5), "progress"),
    "load_checkpoint(cancel=5)": (lambda m: api.load_checkpoint("worked-example", cancel=5), "cancel"),
    "load_checkpoint(placement='auto')": (lambda m: api.load_checkpoint("worked-example", placement="auto"),
                                          "placement"),
    "encode(5)": (lambda m: m.encode(5), "text"),
    "trace(5)": (lambda m: m.trace(5), "text"),
    "trace(spec='x')": (lambda m: m.trace("abc", spec="x"), "spec"),
    "trace(interventions=['x'])": (lambda m: m.trace("abc", interventions=["x"]), "interventions"),
    "trace_ids(truncated_from='x')": (lambda m: m.trace_ids([1, 2], truncated_from="x"), "truncated_from"),
    "trace_ids(cancel=5)": (lambda m: m.trace_ids([1, 2], cancel=5), "cancel"),
    "generate('m', 'a')": (lambda m: api.generate("m", "abc"), "loaded"),
    "generate(m, 5)": (lambda m: api.generate(m, 5), "prompt"),
    "generate(m, [1.5])": (lambda m: api.generate(m, [1.5]), "token id"),
    "generate(m, ['a'])": (lambda m: api.generate(m, ["a"]), "token id"),
    "generate(params=dict)": (lambda m: api.generate(m, "abc", {"temperature": 0}), "params"),
    "generate(on_step=5)": (lambda m: api.generate(m, "abc", on_step=5), "on_step"),
    "generate(on_overflow='x')": (lambda m: api.generate(m, "abc", on_overflow="x"), "on_overflow"),
    "generate_steps(m, 'abc')": (lambda m: next(api.generate_steps(m, "abc")), "token ids"),
    "SamplingParams(temperature='hot')": (lambda m: api.SamplingParams(temperature="hot"), "temperature"),
    "SamplingParams(seed=-1)": (lambda m: api.SamplingParams(seed=-1), "seed"),
    "CaptureSpec(kinds='resid')": (lambda m: api.CaptureSpec(kinds="resid"), "kinds"),
    "CaptureSpec(layers='x')": (lambda m: api.CaptureSpec(layers="x"), "layers"),
    "Placement(max_memory={'cpu': 'x'})": (lambda m: api.Placement(max_memory={"cpu": "x"}), "max-memory"),
    "Placement(offload_dir=5)": (lambda m: api.Placement(offload_dir=5), "offload_dir"),
    "trace[5]": (lambda m: m.trace("abc")[5], "keys"),
    "write_trace_safetensors('x', 'f')": (lambda m: api.write_trace_safetensors("x", "f"), "trace"),
    "read_trace_safetensors(None)": (lambda m: api.read_trace_safetensors(None), "path"),
    "save_native('m', ...)": (lambda m: api.save_native("m", m.tokenizer, "n"), "model"),
    "activation_patching(loaded, ...)": (lambda m: api.activation_patching(m, [1, 2], [2, 2], 1), "model"),
    "activation_patching(target='x')": (lambda m: api.activation_patching(m.model, [1, 2], [2, 2], "x"), "target"),
    "attribution_patching(ids 'a')": (lambda m: api.attribution_patching(m.model, "ab", "ba", 1), "clean_ids"),
    "direct_logit_attribution(target='x')": (lambda m: api.direct_logit_attribution(m.trace("abc"), "x"), "target"),
    "open_sae(5, cfg)": (lambda m: api.open_sae(5, m.config), "directory"),
    "feature_intervention(5, 1)": (lambda m: api.feature_intervention(5, 1), "sae"),
    "steer(1, 'x', 1)": (lambda m: api.steer(0, "x", 1.0), "steering vector"),
    "ModelConfig.from_dict(5)": (lambda m: api.ModelConfig.from_dict(5), "model configuration"),
    "Transformer(5)": (lambda m: api.Transformer(5), "cfg"),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_wrong_argument_is_one_line_naming_it(m, name):
    call, names = CALLS[name]
    with pytest.raises(ExplorerError) as info:
        call(m)
    message = str(info.value)
    assert not isinstance(info.value, InternalError) and "\n" not in message and len(message) < 400
    assert names in message, message


def test_the_old_exception_types_still_catch_them(m):
    """Code that caught ValueError, TypeError or KeyError before still does."""
    with pytest.raises(ValueError):
        api.SamplingParams(top_k=1.5)
    with pytest.raises(TypeError):
        api.generate(m, "abc", {"temperature": 0})
    with pytest.raises(KeyError):
        m.trace("abc")["nope"]
