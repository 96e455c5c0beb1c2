"""Fault injection, interrupt class (issue 36 item 20): a Ctrl-C that lands inside a C
extension (h5py converts a KeyboardInterrupt raised under its lock into another exception, e.g.
SystemError) was read as a damaged split, recorded as a skipped scorer, and the command exited 0.
Here a real SIGINT is delivered to the process by `os.kill` while a scorer runs, and the
scorer does what h5py does with it: catches the KeyboardInterrupt and raises something else (a
featstore InputError naming an "unreadable structure", or a SystemError), or swallows it. The
reference is the README's exit code for an interrupt: 130, whatever exception came out."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from featstore import Store
from featstore.errors import InputError
from featstore.store import interrupts
from scorers.methods.msp import MSP
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays


def _store(path):
    arrays = structured_arrays(num_classes=3, dim=8, n_train=40, n_val=20, n_test=20, n_ood=20)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return path


def _interrupted_then(what: str):
    def score(self, split):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            np.zeros(1).sum()        # the handler runs at the next bytecode
        except KeyboardInterrupt:
            if what == "input_error":
                raise InputError(f"split {split.name!r}: unreadable structure; re-extract "
                                 "the split") from None
            if what == "system_error":
                raise SystemError("error return without exception set") from None
        return np.zeros(split.num_rows)   # swallowed: a made-up result
    return score


@pytest.mark.parametrize("what", ["input_error", "system_error", "swallowed"])
def test_an_interrupt_always_exits_130(tmp_path, capsys, monkeypatch, what):
    store = _store(tmp_path / "s")
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs in the background
    monkeypatch.setattr(MSP, "score", _interrupted_then(what))
    for args in (["eval", store, "--all", "--no-cache", "--boot", "20"],
                 ["eval", store, "--method", "msp", "--no-cache", "--boot", "20"]):
        code, _out, err = run_cli(capsys, *args)
        assert code == 130, (what, err)
        assert err.strip().splitlines()[-1] == "interrupted"
        assert "skipped" not in err and "unexpected" not in err
    assert not interrupts.interrupted() or signal.getsignal(signal.SIGINT) \
        is before  # the CLI put back the handler it found


def test_no_interrupt_no_record(tmp_path, capsys):
    """The record is cleared per command: a command after an interrupted one runs normally."""
    store = _store(tmp_path / "s")
    code, _out, err = run_cli(capsys, "eval", store, "--method", "msp", "--boot", "20")
    assert code == 0, err
    assert not interrupts.interrupted()
