"""Corpus runs (explorer.core.corpus) against brute force: top-k per neuron and feature, the distribution,
head scores as their per-prompt definition averaged over the windows, the head finder on the induction model,
two half-runs merged, and the command line. (tests/core/test_corpus.py is the training corpus, another thing.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from explorer.cli import main
from explorer.core.analysis.attention import NAMES, head_statistics
from explorer.core.analysis.chance import chance_level
from explorer.core.checkpoint import load_checkpoint
from explorer.core.corpus import CorpusError, open_run
from explorer.core.corpus.accumulate import BIN_EDGES, N_BINS
from explorer.core.corpus.merge import merge_runs
from explorer.core.corpus.run import run_corpus
from explorer.core.trace import CaptureSpec, capture
from tests.core.corpus_reference import brute_top, pack, run_windows, table_rows

ROOT = Path(__file__).resolve().parents[2]
W, K = 32, 5


@pytest.fixture(scope="module")
def shakespeare():
    return load_checkpoint("shakespeare", device="cpu")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    held = (ROOT / "models" / "shakespeare" / "heldout_sample.txt").read_text(encoding="utf-8")
    return [held[:2500], "To be, or not to be: that is the question.", held[2500:4200]]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def token_numbers(windows: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([w * W + np.arange(len(ids)) for w, ids in enumerate(windows)])


def assert_same_top(values, ids, ref_values, ref_ids, tol=1e-5):
    """Equal top lists, where two values closer than ``tol`` (float rounding of another batch shape) may swap."""
    np.testing.assert_allclose(values, ref_values, rtol=tol, atol=tol)
    for r, (a, b) in enumerate(zip(ids, ref_ids)):
        near = [i for i, v in enumerate(ref_values) if abs(v - ref_values[r]) < tol]
        assert a == b or a in [ref_ids[i] for i in near]


def test_neuron_top_k_and_distribution_equal_a_brute_force_scan(shakespeare, texts, tmp_path):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    summary = run_corpus(shakespeare, corpus, tmp_path / "run.db", window=W, batch=1000, k=K)
    windows = pack(shakespeare.tokenizer, texts, W)
    assert summary.complete and summary.tokens == sum(map(len, windows)) and summary.windows == len(windows)
    arrays = run_windows(shakespeare.model, windows)
    g = token_numbers(windows)
    cfg = shakespeare.config
    with open_run(summary.path) as run:
        for layer in range(cfg.n_layers):
            post = np.concatenate([a[f"blocks.{layer}.mlp.post"].reshape(-1, cfg.d_ff) for a in arrays])
            for unit in range(0, cfg.d_ff, 7):
                values, ids = brute_top(post[:, unit], g, K)
                examples = run.top_examples("neurons", layer, unit, before=3, after=2)
                assert [e.window * W + e.index for e in examples] == ids.tolist()
                assert [e.value for e in examples] == values.tolist()
                e = examples[0]
                window = windows[e.window]
                assert e.token_ids == tuple(window[max(0, e.index - 3):e.index + 3].tolist())
                assert e.token_ids[e.focus] == window[e.index] and e.tokens[e.focus] == shakespeare.tokenizer.display(
                    int(window[e.index]))
                d = run.distribution("neurons", layer, unit)
                column = post[:, unit]
                assert d.tokens == len(column) and d.max == column.max()
                assert d.mean == pytest.approx(column.astype(np.float64).mean(), rel=1e-9, abs=1e-12)
                assert d.std == pytest.approx(column.astype(np.float64).std(), rel=1e-6)
                assert d.firing_rate == pytest.approx((column > 0).mean())
                want = np.bincount(np.searchsorted(BIN_EDGES, column, side="left"), minlength=N_BINS)
                assert d.counts.tolist() == want.tolist()
                assert d.bin_of(column[0]) == np.searchsorted(BIN_EDGES, column[0])
            table = run.unit_table("neurons", layer)
            np.testing.assert_allclose(table["max"], post.max(axis=0))
            np.testing.assert_allclose(table["firing_rate"], (post > 0).mean(axis=0))
        first = run.top_examples("neurons", 0, 0)[0]
        assert first.doc_name.startswith("docs.jsonl:") and first.doc in (0, 1, 2)
        prompt = run.prompt_ids(first)
        assert prompt == windows[first.window][:first.index + 1].tolist()
        assert run.token_text(prompt) == shakespeare.tokenizer.decode(prompt)


def test_smaller_batches_give_the_same_top_lists(shakespeare, texts, tmp_path):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    whole = run_corpus(shakespeare, corpus, tmp_path / "one.db", window=W, batch=1000, k=K, heads=False)
    small = run_corpus(shakespeare, corpus, tmp_path / "small.db", window=W, batch=3, k=K, heads=False)
    with open_run(whole.path) as a, open_run(small.path) as b:
        for layer, unit in [(0, 3), (1, 100), (3, 511)]:
            x, y = a.top_examples("neurons", layer, unit), b.top_examples("neurons", layer, unit)
            assert_same_top([e.value for e in y], [e.window * W + e.index for e in y],
                            [e.value for e in x], [e.window * W + e.index for e in x])


def test_head_scores_are_the_per_prompt_definition_averaged_over_windows(shakespeare, texts, tmp_path):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    summary = run_corpus(shakespeare, corpus, tmp_path / "run.db", window=W, batch=1000, k=K, units=set())
    windows = pack(shakespeare.tokenizer, texts, W)
    per_window = {name: [] for name in NAMES}
    chance = {name: [] for name in NAMES}
    for ids in windows:
        trace, _ = capture(shakespeare.model, ids.tolist(), [str(i) for i in ids], CaptureSpec.everything())
        for name in NAMES:
            per_window[name].append(head_statistics(trace, name))
            chance[name].append(chance_level(name, ids))
    with open_run(summary.path) as run:
        table = run.head_scores()
        for name in NAMES:
            want = np.nanmean(np.stack(per_window[name]), axis=0)
            np.testing.assert_allclose(table["scores"][name], want, rtol=1e-5, atol=1e-6, err_msg=name)
            assert table["chance"][name] == pytest.approx(np.nanmean(chance[name]), rel=1e-12)
            defined = (~np.isnan(np.stack(per_window[name]))).sum(axis=0)
            assert table["windows"][name].tolist() == defined.tolist()
        arrays = run_windows(shakespeare.model, windows)
        for layer, head in [(0, 1), (3, 2)]:
            lifts, ids = [], []
            pattern = [a[f"blocks.{layer}.attn.pattern"][:, head] for a in arrays]
            for w, p in enumerate([q for block in pattern for q in block]):
                n = p.shape[0]
                for i in range(1, n):
                    j = int(np.argmax(p[i, 1:])) + 1
                    lifts.append(p[i, j] - 1 / (i + 1))
                    ids.append((w * W + i) * W + j)
            values, best = brute_top(np.asarray(lifts, np.float32), np.asarray(ids), K)
            pairs = run.head_pairs(layer, head)
            assert_same_top([x.lift for x in pairs], [(x.window * W + x.query_index) * W + x.key_index for x in pairs],
                            values.tolist(), best.tolist())
            assert pairs[0].tokens[pairs[0].query] == shakespeare.tokenizer.display(
                int(windows[pairs[0].window][pairs[0].query_index]))


def test_features_of_an_sae_equal_a_brute_force_scan(shakespeare, texts, tmp_path):
    pytest.importorskip("sae_lens", reason="the reference SAE files are written with sae_lens (test extra)")
    import torch

    from explorer.core.features.sae import open_sae
    from tests.core.sae_reference import write_sae

    write_sae(tmp_path / "sae", "standard", "blocks.1.hook_resid_post", d_in=128, d_sae=48, model_name="shakespeare")
    sae = open_sae(tmp_path / "sae", shakespeare.config, "shakespeare")
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    summary = run_corpus(shakespeare, corpus, tmp_path, sae=sae, window=W, batch=1000, k=K, heads=False,
                         units={"features"})
    assert summary.path.name == "shakespeare__docs__sae.corpus.db"
    windows = pack(shakespeare.tokenizer, texts, W)
    resid = np.concatenate([a["blocks.2.resid_pre"].reshape(-1, 128) for a in run_windows(shakespeare.model, windows)])
    with torch.inference_mode():
        acts = sae.encode(torch.as_tensor(resid)).numpy()
    g = token_numbers(windows)
    with open_run(summary.path) as run:
        assert [grp.source for grp in run.groups()] == ["features"] and run.info.sae == sae.name
        for feature in range(48):
            values, ids = brute_top(acts[:, feature], g, K)
            examples = run.top_examples("features", 2, feature)
            assert_same_top([e.value for e in examples], [e.window * W + e.index for e in examples],
                            values.tolist(), ids.tolist())
            assert run.distribution("features", 2, feature).firing_rate == pytest.approx((acts[:, feature] > 0).mean())


def test_the_head_finder_ranks_induction_head_1_2_first_on_the_induction_model(tmp_path):
    model = load_checkpoint("induction", device="cpu")
    summary = run_corpus(model, "sample", tmp_path / "ind.db", tokens=50_000)  # 1.1 leads on the first 10k
    with open_run(summary.path) as run:
        ranking = run.head_ranking("induction")
        assert (ranking[0].layer, ranking[0].head) == (1, 2)
        assert ranking[0].score > 0.9 > 0.1 > ranking[0].chance
        assert {(r.layer, r.head) for r in ranking[:4]} == {(1, 0), (1, 1), (1, 2), (1, 3)}
        assert (run.head_ranking("previous_token")[0].layer, run.head_ranking("previous_token")[0].head) == (0, 1)


def test_two_half_runs_merged_equal_one_whole_run(shakespeare, texts, tmp_path):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    n = 20 * W
    whole = run_corpus(shakespeare, corpus, tmp_path / "whole.db", window=W, batch=4, k=K)
    first = run_corpus(shakespeare, corpus, tmp_path / "a.db", window=W, batch=4, k=K, tokens=n)
    second = run_corpus(shakespeare, corpus, tmp_path / "b.db", window=W, batch=4, k=K, skip=n)
    assert first.tokens == n and first.tokens + second.tokens == whole.tokens
    merged = merge_runs([first.path, second.path], tmp_path / "merged.db")
    for table in ("documents", "windows", "top"):
        assert table_rows(merged, table) == table_rows(whole.path, table), table
    with open_run(merged) as m, open_run(whole.path) as w:
        assert m.info.tokens == w.info.tokens and m.info.windows == w.info.windows and m.info.complete
        for layer, unit in [(0, 0), (2, 300)]:
            a, b = m.distribution("neurons", layer, unit), w.distribution("neurons", layer, unit)
            assert a.counts.tolist() == b.counts.tolist() and a.mean == pytest.approx(b.mean, rel=1e-12, abs=1e-15)
        for name in NAMES:
            np.testing.assert_allclose(m.head_scores()["scores"][name], w.head_scores()["scores"][name], rtol=1e-12)
    with pytest.raises(CorpusError, match="covers windows another run covers"):
        merge_runs([first.path, first.path], tmp_path / "twice.db")
    with pytest.raises(CorpusError, match="cannot be resumed"):
        run_corpus(shakespeare, corpus, merged, window=W, batch=4, k=K)


def test_a_run_asked_for_more_tokens_goes_on_and_equals_one_run(shakespeare, texts, tmp_path):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    whole = run_corpus(shakespeare, corpus, tmp_path / "whole.db", window=W, batch=4, k=K)
    part = run_corpus(shakespeare, corpus, tmp_path / "part.db", window=W, batch=4, k=K, tokens=10 * W)
    assert not part.complete or part.tokens == 10 * W
    rest = run_corpus(shakespeare, corpus, tmp_path / "part.db", window=W, batch=4, k=K)
    assert rest.tokens == whole.tokens
    for table in ("documents", "windows", "top"):  # the sums: the same up to the order of addition (other batches)
        assert table_rows(whole.path, table) == table_rows(rest.path, table), table
    with open_run(whole.path) as a, open_run(rest.path) as b:
        assert a.distribution("neurons", 1, 9).counts.tolist() == b.distribution("neurons", 1, 9).counts.tolist()
        np.testing.assert_allclose(a.head_scores()["scores"]["induction"], b.head_scores()["scores"]["induction"],
                                   rtol=1e-12)


def test_command_line_runs_reads_and_merges(tmp_path, capsys, texts):
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    args = ["corpus", "--checkpoint", "shakespeare", "--device", "cpu", "--corpus", str(corpus), "--window", "64"]
    assert main(args + ["--out", str(tmp_path / "a.db"), "--tokens", "640"]) == 0
    out = capsys.readouterr().out
    assert "shakespeare over docs: 640 tokens in 10 windows of 64" in out and "heads by induction score" in out
    assert main(args + ["--out", str(tmp_path / "b.db"), "--skip", "640"]) == 0
    capsys.readouterr()
    assert main(["corpus", "merge", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--out", str(tmp_path / "c.db")]) == 0
    assert "(the whole corpus)" in capsys.readouterr().out
    assert main(["corpus", "info", str(tmp_path / "c.db")]) == 0
    assert "neurons: layers 0-3, 512 each" in capsys.readouterr().out
    assert main(["corpus", "--checkpoint", "shakespeare", "--device", "cpu", "--corpus", str(corpus), "--window", "32",
                 "--out", str(tmp_path / "a.db")]) == 2
    assert "holds a run with another --window: give another --out" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "d.db"), "--skip", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "whole number of windows" in err
    assert main(["corpus", "--checkpoint", "shakespeare", "--corpus", str(tmp_path / "none"), "--out",
                 str(tmp_path / "e.db")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no corpus at")
    assert main(["corpus", "info", str(tmp_path / "missing.db")]) == 2
    reader = ("import sys; from explorer.core.corpus import open_run; run = open_run(sys.argv[1]); "
              "run.top_examples('neurons', 1, 2); run.head_ranking('induction'); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", reader, str(tmp_path / "c.db")], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "False"  # a panel or a notebook reads a run without torch


def test_duplicate_token_and_induction_by_hand():
    from explorer.core.analysis.attention import duplicate_token_score, induction_score

    p = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.5, 0.2, 0.3]])
    ids = [5, 7, 5]  # query 2 repeats token 0: duplicate looks at key 0, induction at key 1 (what followed it)
    assert duplicate_token_score(p, ids) == pytest.approx(0.5)
    assert induction_score(p, ids) == pytest.approx(0.2)
    assert chance_level("duplicate_token", ids) == pytest.approx(1 / 3)
    assert chance_level("duplicate_token", [5, 5, 7]) == pytest.approx(1 / 2)  # query 1 sees 2 keys, one a repeat
    assert math.isnan(chance_level("induction", [5, 5, 7]))  # its earlier occurrence is the previous token
    assert math.isnan(duplicate_token_score(p, [1, 2, 3]))


def test_another_kind_of_unit_is_one_more_source(shakespeare, texts, tmp_path, monkeypatch):
    """What a mixture of experts adds (the router's probability per expert at a site of its own) is a SiteSource
    offered by one more factory; here a stand-in reads mlp.pre, and its top-k equal brute force."""
    from explorer.core.corpus import units

    monkeypatch.setattr(units, "SOURCE_FACTORIES", units.SOURCE_FACTORIES + [
        lambda cfg, sae: units.SiteSource("experts", "expert", "mlp.pre", [0, 2], cfg.d_ff)])
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    summary = run_corpus(shakespeare, corpus, tmp_path / "run.db", window=W, batch=1000, k=K, heads=False,
                         units={"experts"})
    windows = pack(shakespeare.tokenizer, texts, W)
    arrays = run_windows(shakespeare.model, windows)
    g = token_numbers(windows)
    with open_run(summary.path) as run:
        assert [(grp.source, grp.layer) for grp in run.groups()] == [("experts", 0), ("experts", 2)]
        pre = np.concatenate([a["blocks.2.mlp.pre"].reshape(-1, 512) for a in arrays])
        for unit in (0, 77, 511):
            values, ids = brute_top(pre[:, unit], g, K)
            assert [e.window * W + e.index for e in run.top_examples("experts", 2, unit)] == ids.tolist()


def test_experts_of_a_mixture_of_experts_model_equal_a_brute_force_scan(tmp_path):
    """A real MoE model (a tiny Qwen3-MoE with one dense layer): each expert's router score along the corpus is
    a unit whose top contexts equal brute force; the dense layer's neurons are units, the MoE layers have none."""
    import random

    from decoder_reference import build
    from moe_reference import EAGER

    from explorer.core.checkpoint.in_memory import from_transformers
    from explorer.core.tokenize.base import VocabTokenizer

    model = build("Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_experts=6, num_experts_per_tok=2, mlp_only_layers=[1],
                  **EAGER)
    loaded = from_transformers(model, VocabTokenizer([f"w{i}" for i in range(100)], split="words", name="words"),
                               device="cpu")
    rng = random.Random(0)
    texts = [" ".join(f"w{rng.randrange(100)}" for _ in range(rng.randrange(20, 90))) for _ in range(6)]
    corpus = write_jsonl(tmp_path / "docs.jsonl", texts)
    summary = run_corpus(loaded, corpus, tmp_path / "moe.db", window=W, batch=1000, k=K, heads=False,
                         units={"experts", "neurons"})
    windows = pack(loaded.tokenizer, texts, W)
    arrays = run_windows(loaded.model, windows)
    g = token_numbers(windows)
    moe = [layer for layer in range(loaded.config.n_layers) if loaded.config.layer(layer).is_moe]
    with open_run(summary.path) as run:
        groups = {(grp.source, grp.layer): grp.units for grp in run.groups()}
        assert groups == {**{("experts", layer): 6 for layer in moe}, ("neurons", 1): loaded.config.layer(1).d_ff}
        for layer in moe:
            probs = np.concatenate([a[f"blocks.{layer}.moe.probs"].reshape(-1, 6) for a in arrays])
            for expert in range(6):
                values, ids = brute_top(probs[:, expert], g, K)
                top = run.top_examples("experts", layer, expert)
                assert_same_top([e.value for e in top], [e.window * W + e.index for e in top], values, ids)
