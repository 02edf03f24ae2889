"""CorpusState: the corpus run open beside the session's model (``explorer.core.corpus``), read by the panels.

A run is a database a corpus run wrote (File ▸ Run over a corpus…, or ``transformer-explorer corpus``):
every neuron's, feature's and expert's top examples and histogram, every head's corpus scores. It is
opened on a worker (``open_run``), where the open model's fingerprint (``corpus.run.fingerprint_model``,
torch) is compared with the one the run recorded: a run of another model, or of this one at another
precision, is not opened, and ``failed`` says so in one line. An SAE's features are shown only for the
SAE the run kept (``sae_matches``: its fingerprint too, on a worker). A new model closes the run.

Reading a run (``run.top_examples``, ``run.distribution``, ``run.head_ranking``) is a few indexed look-ups
of the database (milliseconds; torch-free): the panels read it on the GUI thread.

Signals: ``changed()`` (a run opened or closed, an SAE's check finished), ``failed(str)`` (one line),
``busy(bool)`` (an open under way).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from explorer.core.corpus.read import CorpusRun, open_run
from explorer.core.corpus.reading import CorpusError
from explorer.ui.session import background

if TYPE_CHECKING:
    from explorer.core.loaded import LoadedModel


class CorpusMismatch(CorpusError):
    """A run made with another model (or SAE) than the open one."""


def model_fingerprint(loaded: LoadedModel) -> str:
    """The fingerprint a corpus run records for ``loaded``'s model (torch: on a worker)."""
    from explorer.core.corpus.run import fingerprint_model

    return fingerprint_model(loaded.model)


def sae_fingerprint(sae: Any) -> str:
    from explorer.core.corpus.run import fingerprint_sae

    return fingerprint_sae(sae)


def open_checked(path: str, loaded: LoadedModel | None, known: str | None = None) -> tuple[CorpusRun, str | None]:
    """Open the run at ``path`` and check it was made with ``loaded`` (``known``: its fingerprint, when computed
    before). Returns the run and the model's fingerprint; raises ``CorpusError`` (``CorpusMismatch``) in one line."""
    run = open_run(path)
    try:
        if loaded is None:
            return run, None
        fingerprint = known or model_fingerprint(loaded)
        if run.meta.get("model_fingerprint") != fingerprint:
            name = Path(path).name
            raise CorpusMismatch(f"{name} was made with another model ({run.info.model}), or this one at another "
                                 f"precision: its numbers do not describe {getattr(loaded, 'name', 'this model')}, "
                                 "so it is not opened")
        return run, fingerprint
    except BaseException:
        run.close()
        raise


class CorpusState(QObject):
    changed = Signal()
    failed = Signal(str)
    busy = Signal(bool)

    def __init__(self, model: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._model = model  # the session's LoadedModel now (None: none)
        self.run: CorpusRun | None = None
        self.last_error = ""
        self._newest = background.Newest()
        self._fingerprint: tuple[Any, str] | None = None  # (the model, its fingerprint), computed once per model
        self._saes: dict[int, tuple[Any, bool | None]] = {}  # id(sae) -> (sae, whether the run kept it; None: checking)

    # --- opening and closing ---------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        return None if self.run is None else self.run.path

    def open(self, path: str | Path) -> background.Task | None:
        """Open the run at ``path`` for the open model, on a worker: ``changed`` or ``failed`` follows."""
        loaded = self._model()
        if loaded is None:
            self._fail("Open a model first: a corpus run is read against the model that made it")
            return None
        known = self._fingerprint[1] if self._fingerprint is not None and self._fingerprint[0] is loaded else None
        self.busy.emit(True)
        return background.run(open_checked, str(path), loaded, known, newest=self._newest,
                              on_done=lambda result: self._opened(result, loaded),
                              on_error=lambda failure: self._fail(failure.message),
                              on_finished=lambda: self.busy.emit(False))

    def open_now(self, path: str | Path) -> CorpusRun:
        """Open on this thread (tests, benchmarks, notebooks); raises ``CorpusError``."""
        loaded = self._model()
        self._opened(open_checked(str(path), loaded), loaded)
        return self.run

    def _opened(self, result: tuple[CorpusRun, str | None], loaded: Any) -> None:
        run, fingerprint = result
        if self._model() is not loaded:  # the model changed meanwhile: the run was checked against the old one
            run.close()
            return
        if fingerprint is not None:
            self._fingerprint = (loaded, fingerprint)
        old, self.run = self.run, run
        self._saes.clear()
        self.last_error = ""
        if old is not None:
            old.close()
        self.changed.emit()

    def _fail(self, line: str) -> None:
        self.last_error = line
        self.failed.emit(line)

    def close(self) -> None:
        self._newest.drop()  # an open under way lands nowhere
        self._saes.clear()
        if self.run is not None:
            run, self.run = self.run, None
            run.close()
            self.changed.emit()

    def model_changed(self) -> None:
        """A new model: the run (made with the old one) closes, and the old fingerprint is forgotten."""
        self._fingerprint = None
        self.close()

    # --- what the run holds ----------------------------------------------------------------------
    def kept(self, source: str, layer: int) -> int:
        """How many units of ``source`` the run kept in ``layer`` (0: none, or no run)."""
        if self.run is None:
            return 0
        return next((g.units for g in self.run.groups() if g.source == source and g.layer == int(layer)), 0)

    def has_heads(self) -> bool:
        return self.run is not None and bool(self.run.info.heads)

    def head_table(self) -> dict[str, Any] | None:
        """Every head's corpus scores (``CorpusRun.head_scores``), or None without a run that kept them."""
        return self.run.head_scores() if self.has_heads() else None

    def describe(self) -> str:
        """The run in a few words: "sample, 20,000 tokens" (for titles)."""
        if self.run is None:
            return ""
        info = self.run.info
        return f"{info.corpus}, {info.tokens:,} tokens"

    def sae_matches(self, sae: Any) -> bool | None:
        """Whether the run's features are this SAE's (its fingerprint, computed once on a worker: None until
        known, then ``changed``)."""
        run = self.run
        if run is None or sae is None or not run.meta.get("sae_fingerprint"):
            return False
        entry = self._saes.get(id(sae))
        if entry is not None and entry[0] is sae:
            return entry[1]
        self._saes[id(sae)] = (sae, None)
        background.run(sae_fingerprint, sae, on_done=lambda fp: self._sae_checked(sae, run, fp),
                       on_error=lambda failure: self._sae_checked(sae, run, ""))
        return None

    def _sae_checked(self, sae: Any, run: CorpusRun, fingerprint: str) -> None:
        if run is not self.run:
            return
        self._saes[id(sae)] = (sae, fingerprint == run.meta.get("sae_fingerprint"))
        self.changed.emit()
