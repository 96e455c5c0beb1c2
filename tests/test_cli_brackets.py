"""Brackets reach the terminal as written (issue 47 item 3): typer renders help in rich markup
mode and rich takes `[transform]` or `[executor]` for a style tag, so those words vanished from
`protocol osr`, `protocol ten-methods`, `gscore gbench` and every sanity warning. Every
command's help is rendered (a walk of the click tree, as tests/test_cli_terminal.py does) and
every bracketed word of its help texts must be in the output; the sanity warnings go through
each path they take to the terminal. Reference: the raw help strings and the warning text of
`featstore.store.sanity.check_confusion` on a confusion matrix written by hand."""

from __future__ import annotations

import re

import numpy as np
import typer

import cli.console as console
from featstore.errors import FeatstoreWarning
from featstore.store.sanity import check_confusion
from featstore.workflows.experiments.render import rich_notes

#: a word rich could take for a tag: `[` then a lowercase letter, `#`, `/` or `@`
TAG_LIKE = re.compile(r"\[[a-z#/@][^\[\]\s]*\]")


def _commands() -> list[tuple[tuple[str, ...], list[str]]]:
    """(command path, its help texts: the command's and every parameter's) for every command
    and group of the app."""
    from cli.app import app

    found: list[tuple[tuple[str, ...], list[str]]] = []

    def walk(cmd, path):
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        found.append((path, texts))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_commands_help_keeps_its_bracketed_words(capsys, monkeypatch):
    """Each help rendered by the tree `cli.app.main` runs (`cli.app._command`: built once
    here, as main builds it per run)."""
    from cli.app import _command

    monkeypatch.setenv("COLUMNS", "200")   # one option per line: no word split by wrapping
    commands = _commands()
    assert len(commands) >= 30
    root = _command()
    words_seen = set()
    try:
        for path, texts in commands:
            code = root.main(args=[*path, "--help"], prog_name="featstore",
                             standalone_mode=False)
            out, err = capsys.readouterr()
            assert code == 0 and out, (path, err)
            _check_words(path, texts, " ".join(out.split()), words_seen)
    finally:
        console.reset()
    # the word of the issue is among those checked (`--executor-config`: "[executor] table")
    assert "[executor]" in words_seen


def _check_words(path: tuple[str, ...], texts: list[str], flat: str, seen: set[str]) -> None:
    """Every tag-like bracketed word of the raw help `texts` is in the rendered help."""
    for word in {w for t in texts for w in TAG_LIKE.findall(t)}:
        seen.add(word)
        assert word in flat, (" ".join(path), word)


def _near_chance_warning() -> str:
    """check_confusion's warning for a 2-class matrix where every row is predicted class 0
    (by hand: accuracy 50% = chance 50%)."""
    warning = check_confusion(np.array([[5, 0], [5, 0]]))["warning"]
    assert "the [transform] and the labels" in warning
    return warning


def test_sanity_warnings_keep_their_brackets_on_every_path(capsys):
    warning = _near_chance_warning()
    console.reset()
    try:
        # extraction: warnings.warn(FeatstoreWarning) -> the CLI's warnings.showwarning
        console._showwarning(f"id/test: {warning}", FeatstoreWarning, __file__, 1)
        console.log(f"OSR split 0: {warning}")             # a protocol's log line
        console.err.print(*rich_notes({"aggregate": {"osr0": {"MSP": {"flags": [warning]}}},
                                       "skipped": []}))   # the runner's flagged table
    finally:
        console.reset()
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("[transform]") == 3, err
    assert "warning: id/test: ID accuracy 50.00% is near chance" in err
