"""The real CLI entry point (`cli.app.main`) run in-process, its exit code and output
captured."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run the real CLI entry point (`cli.app.main`) in-process: (exit code, stdout, stderr)."""
    from cli.app import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@dataclass(frozen=True)
class CliRun:
    """One in-process run of the CLI: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


def run_cli_captured(*args) -> CliRun:
    """`run_cli` without capsys (session fixtures cannot use it): stdout and stderr of the
    run are captured with contextlib's redirections (the CLI's rich consoles write to
    whatever sys.stdout / sys.stderr is at print time)."""
    from cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliRun(code, out.getvalue(), err.getvalue())


def last_line_error(result: tuple[int, str, str], code: int, *fragments: str) -> str:
    """A CLI run that exited `code` with its error as the last stderr line (`error: ...`,
    holding each fragment, no traceback); returns that line."""
    got, _out, err = result
    assert got == code, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), err
    assert "unexpected" not in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])
    return lines[-1]


def single_line_error(result: tuple[int, str, str], code: int, *fragments: str) -> str:
    """A CLI run that exited `code` with exactly one stderr line, `error: ...`, holding each
    fragment (no traceback); returns it."""
    got, _out, err = result
    assert got == code, (got, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "unexpected" not in lines[0] and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
