"""Generation transcripts: JSON-able dicts of the steps, written atomically (headless)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from explorer.core.loaded import LoadedModel
from explorer.core.config import ModelConfig
from explorer.core.generation.generate import Step, generate
from explorer.core.model import Transformer
from explorer.core.generation.sampling import SamplingParams, StepScores, softmax
from explorer.core.tokenize.base import VocabTokenizer
from explorer.core.generation.transcript import FORMAT, transcript_dict, transcript_json, write_transcript_json

PARAMS = SamplingParams(temperature=0.8, top_k=5, repetition_penalty=1.3, seed=3, max_new_tokens=4,
                        stop_at_eos=False, stop_strings=("w99",))


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.manual_seed(0)
    cfg = ModelConfig(arch="tiny", vocab_size=30, n_ctx=32, d_model=16, n_layers=1, n_heads=2, d_head=8, d_ff=32)
    tokenizer = VocabTokenizer([f"w{i}" for i in range(30)], split="words", name="tiny words")
    return LoadedModel(Transformer(cfg).eval(), tokenizer, "tiny", "test", "tiny")


def test_transcript_round_trip_matches_the_steps(loaded, tmp_path):
    prompt = "w1 w2 w3"
    result = generate(loaded, prompt, PARAMS)
    assert result.n_new == 4
    data = transcript_dict(prompt, result.steps, PARAMS, text=result.text, display=loaded.tokenizer.display,
                           stop_reason=result.stop_reason, model=loaded.name)
    path = tmp_path / "out" / "transcript.json"
    write_transcript_json(path, data)
    assert not [p for p in path.parent.iterdir() if p.name != "transcript.json"]  # no temporary left behind
    back = json.loads(path.read_text(encoding="utf-8"))
    assert back == json.loads(transcript_json(data))

    assert back["format"] == FORMAT and back["version"] == 1 and back["model"] == "tiny"
    assert back["prompt"] == prompt and back["text"] == result.text and back["stop_reason"] == "max_new_tokens"
    controls = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(PARAMS).items()}
    assert back["controls"] == controls
    assert back["n_steps"] == len(back["steps"]) == 4
    for record, step in zip(back["steps"], result.steps):
        assert record["index"] == step.index
        assert record["token_id"] == step.token_id and record["text"] == step.text
        assert record["prob"] == pytest.approx(step.prob, abs=1e-12)
        assert record["rank"] == step.rank
        before, after = step.distributions(10)
        assert len(record["before"]) == 10 and len(record["after"]) == len(after) == 5  # top-k 5 leaves 5
        for entry, dist in ((record["before"], before), (record["after"], after)):
            assert [c["id"] for c in entry] == dist.ids.tolist()
            assert [c["prob"] for c in entry] == pytest.approx(dist.probs.tolist(), abs=1e-12)
            assert [c["logit"] for c in entry] == pytest.approx(dist.logits.tolist(), abs=1e-9)
            assert [c["text"] for c in entry] == [loaded.tokenizer.display(i) for i in dist.ids.tolist()]
        raw = softmax(step.scores.logits)
        assert record["raw_prob"] == pytest.approx(raw[step.token_id], abs=1e-9)
        assert record["raw_rank"] == int(np.count_nonzero(step.scores.logits > step.scores.logits[step.token_id]))
        assert record["num_possible"] == 5
        assert record["entropy_before"] == pytest.approx(before.entropy)
        assert record["entropy_after"] == pytest.approx(after.entropy)


def test_transcript_greedy_defaults_and_missing_chosen_id(loaded):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=2, stop_at_eos=False)
    result = generate(loaded, [1, 2, 3], greedy)
    data = transcript_dict("w1 w2 w3", result.steps)  # params from the steps, no display, text joined
    json.loads(transcript_json(data))
    assert data["controls"]["temperature"] == 0.0 and data["controls"]["seed"] is None
    assert data["text"] == "".join(s.text for s in result.steps)
    for record, step in zip(data["steps"], result.steps):
        assert record["prob"] == 1.0 and record["rank"] == 0 and record["num_possible"] == 1
        assert len(record["after"]) == 1 and record["after"][0]["id"] == step.token_id
        # without a display function only the chosen tokens' texts are known
        texts = {c["id"]: c["text"] for c in record["before"]}
        assert texts[step.token_id] == step.text
        assert all(t is None for i, t in texts.items() if i not in {s.token_id for s in result.steps})

    # a step whose scores do not know the chosen id; a removed chosen token gets rank None, prob 0
    logits = np.array([2.0, 1.0, 0.5, -1.0], dtype=np.float32)
    top1 = SamplingParams(top_k=1)
    step = Step(index=0, token_id=2, text="c", scores=StepScores(logits, top1, (0,)), prob=0.0, rank=0, elapsed=0.0)
    record = transcript_dict("p", [step])["steps"][0]
    assert record["rank"] is None and record["prob"] == 0.0
    assert record["raw_rank"] == 2 and record["raw_prob"] == pytest.approx(softmax(logits)[2])
    assert [c["id"] for c in record["after"]] == [0] and record["after"][0]["prob"] == 1.0
    assert transcript_dict("p", [])["steps"] == [] and transcript_dict("p", [])["controls"] is None
