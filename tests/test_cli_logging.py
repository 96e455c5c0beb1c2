"""The library logs, the CLI shows: featstore/ and scorers/ log through per-module loggers and
never print; `cli.app.main` installs its console handler on the `featstore` and `scorers`
loggers at INFO (DEBUG with -v/--verbose, WARNING with -q/--quiet) and takes it off again
after the run. Real stores and the real entry point, run in-process; the expected lines are
those the library's `logger.debug` calls write (scorers.evaluate, featstore.store.store)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from cli.app import main
from featstore import Store


def _cli(capsys, *args) -> tuple[int, str, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def store(tmp_path) -> Store:
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 4)).astype(np.float32), np.zeros(3, np.float32)
    return Store.from_arrays(tmp_path / "s", head=(w, b), splits={
        "id/test": {"features": rng.normal(size=(20, 4)).astype(np.float32)},
        "ood/far/x": {"features": rng.normal(size=(20, 4)).astype(np.float32) + 2}})


SCORE = ("score", "{S}", "--method", "msp", "--split", "id/test", "--no-cache")


def _args(store: Store, *extra: str) -> list[str]:
    return [a.replace("{S}", str(store.path)) for a in (*SCORE, *extra)]


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_shows_the_librarys_debug_lines(store, capsys, where):
    args = _args(store)
    args = ["-v", *args] if where == "before" else [*args, "--verbose"]
    code, out, err = _cli(capsys, *args)
    assert code == 0, err
    lines = err.splitlines()
    assert f"featstore.store.store: opened store {store.path} (mode 'r', 2 splits)" in lines
    assert "scorers.evaluate: msp: 0 of 1 splits from the score cache (cache off)" in lines
    assert any(ln.startswith("scorers.evaluate: msp: fitted on ") for ln in lines)
    assert out  # the table is printed as without -v


def test_default_and_quiet_hide_debug_and_the_handler_comes_off(store, capsys):
    code, out, err = _cli(capsys, *_args(store))
    assert code == 0 and "scorers.evaluate" not in err and "opened store" not in err
    default_out = out
    code, out, err = _cli(capsys, "-q", *_args(store))
    assert (code, out, err) == (0, "", "")
    code, out, err = _cli(capsys, *_args(store), "-v")
    seconds = re.compile(r"\d+\.\d+ s\b")  # the table's fit / score times vary run to run
    assert seconds.sub("", out) == seconds.sub("", default_out)
    for name in ("featstore", "scorers"):  # after the run: the library's loggers as before
        logger = logging.getLogger(name)
        assert logger.handlers == [] and logger.propagate and logger.level == logging.NOTSET


def test_library_warning_records_show_even_with_quiet(store, capsys, monkeypatch):
    """A WARNING record of a library logger is one `warning: ...` line on stderr, at every
    level including -q (the INFO line of the same run only without -q)."""
    import scorers.score_run as score_run

    real = score_run.score_with_defaults  # what `featstore score` calls

    def noisy(*a, **k):
        logging.getLogger("scorers.evaluate").info("an info line")
        logging.getLogger("scorers.evaluate").warning("a warning line")
        return real(*a, **k)

    monkeypatch.setattr(score_run, "score_with_defaults", noisy)
    code, out, err = _cli(capsys, *_args(store))
    assert code == 0 and err.splitlines()[:2] == ["an info line", "warning: a warning line"]
    code, out, err = _cli(capsys, "-q", *_args(store))
    assert (code, out, err) == (0, "", "warning: a warning line\n")
