"""Interrupts stop a command; they are never recorded as a data fault.

A Ctrl-C (SIGINT) raises KeyboardInterrupt wherever Python is. When it lands inside a C
extension that holds a lock or converts errors (h5py's object lock), the KeyboardInterrupt can
come out as another exception (a SystemError, an OSError "unable to open", a KeyError), which a
reader would then report as a damaged file and a run over many scorers would record as a
skip. So the CLI installs `install()`'s handler: it records that an interrupt arrived, then
raises KeyboardInterrupt as Python's own handler does. Every place that turns an exception
into a skip, a cache miss or an error about the data calls `raise_if_interrupted()` first
(`scorers.skipping.run_each`, the score cache, the runner), and the CLI's error boundary
exits 130 ("interrupted") whenever an interrupt was recorded, whatever exception (or none)
came out. A Slurm job of an executor's unit installs it for SIGTERM too (`install(sigterm=
True)`: what Slurm sends a job it requeues, preempts or cancels), so the unit stops there as
on a Ctrl-C rather than run on until the SIGKILL.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_state: dict[str, Any] = {"interrupted": False, "signal": None, "previous": {}, "deferred": 0}


def _handler(signum: int, frame: FrameType | None) -> None:
    _state["interrupted"] = True
    _state["signal"] = signal.Signals(signum).name
    if not _state["deferred"]:
        raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """Inside the block a signal is recorded (`interrupted()`, `received()`) but not raised:
    for the few writes that must land whole while the caller is already stopping on an
    interrupt (a unit's `interrupted` state, written as Slurm's SIGTERM follows submitit's
    requeue). The caller re-raises what stopped it."""
    _state["deferred"] += 1
    try:
        yield
    finally:
        _state["deferred"] -= 1


def install(sigterm: bool = False) -> None:
    """Record SIGINTs (and SIGTERMs with `sigterm`) from now on (main thread only; elsewhere
    a no-op); clears the record."""
    _state["interrupted"], _state["signal"] = False, None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM) if sigterm else (signal.SIGINT,):
            _state["previous"][sig] = signal.signal(sig, _handler)


def uninstall() -> None:
    """Put back the handlers `install()` replaced (the record is kept)."""
    if threading.current_thread() is threading.main_thread():
        for sig, previous in _state["previous"].items():
            if previous is not None:       # None: a handler not set from Python
                signal.signal(sig, previous)
        _state["previous"] = {}


def interrupted() -> bool:
    """Whether a SIGINT arrived since `install()`."""
    return _state["interrupted"]


def received() -> str | None:
    """The name of the last signal recorded since `install()` ("SIGINT", "SIGTERM"), or None."""
    return _state["signal"]


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a SIGINT arrived: call before turning an exception into a skip,
    a cache miss or a data error."""
    if _state["interrupted"]:
        raise KeyboardInterrupt


__all__ = ["deferred", "install", "interrupted", "raise_if_interrupted", "received",
           "uninstall"]
