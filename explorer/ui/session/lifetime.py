"""Letting go of Qt objects whose window closed.

A connection made from Python holds its slot (a lambda, a bound method, a partial) from C++, where
Python's garbage collector cannot see it: a long-lived object whose signal is connected to a closure
over a window keeps that window alive, and so does a finished superqt worker that kept its
connections (the worker's signals object holds the closures, and whatever holds the worker holds
them). ``disconnect_all`` cuts an object's connections; ``release_when_finished`` cuts a worker's once
it has finished and its receivers ran.
"""

from __future__ import annotations

import warnings
from functools import partial
from PySide6.QtCore import QMetaMethod, QObject
from superqt.utils import WorkerBase


def disconnect_all(obj: QObject, keep: tuple[str, ...] = ()) -> None:
    """Disconnect every receiver from every signal ``obj`` has (its own class's and Qt's), but ``keep``."""
    meta = obj.metaObject()
    names = {bytes(meta.method(i).name()).decode() for i in range(meta.methodCount())
             if meta.method(i).methodType() == QMetaMethod.MethodType.Signal}
    for name in names - set(keep):
        signal = getattr(obj, name, None)
        if signal is None:
            continue
        with warnings.catch_warnings():  # a signal nobody listens to says so
            warnings.simplefilter("ignore")
            try:
                signal.disconnect()
            except (RuntimeError, TypeError):
                pass


def release(worker: WorkerBase | None) -> None:
    """Cut a superqt worker off from its receivers (its window closes): what it still sends goes
    nowhere, and the object that kept it is no longer held through the worker's C++ connections."""
    if worker is not None:  # superqt's own "_finished" takes the worker out of its set of running ones
        disconnect_all(worker.signals, keep=("_finished",))


def release_when_finished(worker: WorkerBase) -> WorkerBase:
    """Release ``worker`` (``release``) once it has finished and its other receivers ran: a finished
    worker that kept its connections would keep their owners (a panel, a window) alive. Connect it
    after the worker's other receivers. Returns the worker."""
    worker.finished.connect(partial(release, worker))
    return worker
