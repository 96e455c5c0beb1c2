"""Smaller frictions of a user's first hour (issue 47, item 8), each through the real CLI entry
point: the spinner line says what happened (cached scores, not "fitting"), a warning raised
twice in one run is printed once, and help piped into a file is not squashed to 80 columns.
References: the command's own JSON (`cached`) and the texts printed, counted by hand."""

from __future__ import annotations

import pytest

from featstore.errors import FeatstoreWarning
from tests.helpers.cli import run_cli_captured
from tests.helpers.stores import class_direction_store


@pytest.fixture()
def store(tmp_path):
    return class_direction_store(tmp_path / "s", {"id/train": 60, "id/test": 30,
                                                  "ood/far/noise": 30}, seed=1).path


def test_spinner_lines_say_cached_when_the_table_does(store):
    first = run_cli_captured("eval", store, "--method", "knn", "--method", "msp", "--ci", "0")
    assert first.code == 0, first.err
    assert "knn: fitting on id/train (60 x 8), scoring 2 splits" in first.err
    assert "msp: nothing to fit, scoring 2 splits" in first.err
    again = run_cli_captured("eval", store, "--method", "knn", "--method", "msp", "--ci", "0")
    assert again.code == 0, again.err
    assert "knn: cached scores (nothing fitted or scored)" in again.err
    assert "msp: cached scores" in again.err and "fitting" not in again.err
    assert again.out.count("cached") == 2  # the table's fit+score column agrees


def test_sweep_spinner_reads_as_one_phrase(store):
    run = run_cli_captured("sweep", store, "--method", "knn", "--grid", "K=1,5")
    # the store has no val OOD split: the sweep refuses, after no spinner line at all
    assert run.code == 1 and "sweeping fitting" not in run.err


def test_a_warning_raised_twice_in_one_run_is_printed_once(capsys):
    """The hook the CLI installs as `warnings.showwarning` (pytest records warnings itself,
    so the hook is called as Python's warning machinery calls it), from two places."""
    import cli.console as console

    console.reset()
    console.setup()
    try:
        for line in (10, 20):
            console._showwarning(FeatstoreWarning("split 'id/test': 3 rows"), FeatstoreWarning,
                                 "a.py", line)
        console._showwarning(FeatstoreWarning("another text"), FeatstoreWarning, "b.py", 1)
    finally:
        console.reset()
    console.setup()
    try:  # a new run shows it again
        console._showwarning(FeatstoreWarning("another text"), FeatstoreWarning, "b.py", 1)
    finally:
        console.reset()
    err = capsys.readouterr().err
    assert err.count("warning: split 'id/test': 3 rows") == 1
    assert err.count("warning: another text") == 2


def test_help_piped_keeps_readable_boxes(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    run = run_cli_captured("eval", "--help")  # stdout is a StringIO: not a terminal
    widths = {len(line) for line in run.out.splitlines()}
    assert max(widths) == 120, max(widths)
    monkeypatch.setenv("COLUMNS", "90")  # the user's width still wins
    assert max(len(ln) for ln in run_cli_captured("eval", "--help").out.splitlines()) == 90
