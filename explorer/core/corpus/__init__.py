"""Evidence across a corpus: what every neuron, SAE feature, expert and head does over many texts.

``run_corpus`` (run.py) reads a corpus (reading.py) in fixed-length windows (windows.py), hands what each
kind of unit needs (units.py) to bounded accumulators on the model's device (accumulate.py) and commits
every batch to one SQLite file (store.py, state.py), so a stopped run resumes and parts of a corpus run on
two machines merge (merge.py). ``open_run`` (read.py) reads it back: a unit's top examples and histogram,
every head's corpus scores beside their chance levels. Qt-free; read.py needs no torch.
"""

from __future__ import annotations

from explorer.core.corpus.read import CorpusRun, open_run, rank_heads
from explorer.core.corpus.reading import SAMPLE, Corpus, CorpusError

__all__ = ["SAMPLE", "Corpus", "CorpusError", "CorpusRun", "open_run", "rank_heads", "run_corpus", "merge_runs"]


def __getattr__(name: str):  # the writing side imports torch: only when asked for
    if name == "run_corpus":
        from explorer.core.corpus.run import run_corpus

        return run_corpus
    if name == "merge_runs":
        from explorer.core.corpus.merge import merge_runs

        return merge_runs
    raise AttributeError(name)
