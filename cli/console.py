"""Shared terminal output: the output mode (--json / --quiet), rich consoles, JSON, progress.

Every command calls `setup(json_, quiet)` first and ends with `emit(result, human)`:

- default: `human()` prints tables on stdout (`out`); logs, warnings and progress bars go to
  stderr (`err`).
- `--json`: stdout holds exactly one JSON document (`emit`'s result) and nothing else; the
  human output is suppressed, and anything else written to stdout while the command runs
  (a library's print) is sent to stderr. Logs and progress stay on stderr.
- `--quiet`: no tables, logs, warnings or progress bars; only errors (and the JSON document
  with --json). The library's log records at WARNING and above still show.
- `--verbose`: the library's DEBUG records too.

The library logs through per-module loggers (`logging.getLogger(__name__)` under `featstore`
and `scorers`) and never prints; `setup` installs `ConsoleHandler` on those two loggers at
the level of the mode (WARNING with --quiet, DEBUG with --verbose, else INFO): an INFO record
is its message as a line on stderr, as the library wrote it.

Errors are printed by the boundary in `cli.app.main` on `errors`, which is never silenced.
`cli.app.main` calls `reset()` before and after every run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from featstore.store.textsafe import markup_text, term_text


class SafeConsole(Console):
    """A rich Console that never passes a control character of a string it prints (a
    store's model or split name may hold ANSI / OSC escapes) to the terminal: every string
    renderable goes through `featstore.store.textsafe.term_text` (ESC shows as `\\x1b`)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(term_text(text), **kwargs)


def escape_help(command: Any) -> Any:
    """`command` (the app's click command tree, `typer.main.get_command(app)`) with every
    help text, short help and epilog of every command and parameter passed through
    `featstore.store.textsafe.markup_text`: typer renders help in rich markup mode, where a
    literal `[transform]` or `[executor]` would be taken for a style tag and vanish. Help
    texts carry no markup of their own. Returns the same command."""
    for attr in ("help", "short_help", "epilog"):
        value = getattr(command, attr, None)
        if isinstance(value, str):
            setattr(command, attr, markup_text(value))
    for param in getattr(command, "params", []):
        if isinstance(getattr(param, "help", None), str):
            param.help = markup_text(param.help)
    for sub in getattr(command, "commands", {}).values():
        escape_help(sub)
    return command


def _console(stderr: bool) -> Console:
    console = SafeConsole(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:  # pipes and CI logs: wide enough for the tables
        console = SafeConsole(stderr=stderr, soft_wrap=True, width=160)
    return console


out = _console(stderr=False)     # human results (tables); silent with --json or --quiet
err = _console(stderr=True)      # logs, warnings, progress; silent with --quiet
errors = _console(stderr=True)   # the one-line error of cli.app.main; never silenced

JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document on stdout and nothing else (human output off; "
                   "logs and progress stay on stderr).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bars, tables or logs: only errors (and the JSON "
                          "document with --json).")]


@dataclass
class Mode:
    json: bool = False
    quiet: bool = False
    verbose: bool = False


MODE = Mode()
_saved: dict[str, Any] = {"stdout": None, "devnull": None, "warnings": None, "loggers": None}

#: The library's top-level loggers (every module logs under one of them).
LIBRARY_LOGGERS = ("featstore", "scorers")


class ConsoleHandler(logging.Handler):
    """The library's log records on the CLI's stderr: INFO as the bare message (`err`, under
    the progress bars), DEBUG dimmed with its logger's name, WARNING and above as `warning:
    ...` on the console that --quiet does not silence."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.levelno >= logging.WARNING:
                errors.print(Text.assemble(("warning: ", "yellow"), term_text(text)),
                             highlight=False)
            elif record.levelno >= logging.INFO:
                err.print(text, highlight=False, markup=False)
            else:
                err.print(Text(term_text(f"{record.name}: {text}"), style="dim"),
                          highlight=False)
        except Exception:  # logging's contract: a failing handler never raises
            self.handleError(record)


HANDLER = ConsoleHandler()


def log_level() -> int:
    """The library's log level of this run's mode."""
    if MODE.quiet:
        return logging.WARNING
    return logging.DEBUG if MODE.verbose else logging.INFO


def _install_logging() -> None:
    """`HANDLER` on the library's loggers at `log_level()` (their records stop there: not
    propagated to a root handler as well); the loggers' settings are restored by reset()."""
    if _saved["loggers"] is None:
        saved: list[tuple[logging.Logger, int, bool]] = []
        _saved["loggers"] = saved
        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            saved.append((logger, logger.level, logger.propagate))
            logger.addHandler(HANDLER)
            logger.propagate = False
    for logger, _, _ in _saved["loggers"]:
        logger.setLevel(log_level())


def _uninstall_logging() -> None:
    for logger, level, propagate in _saved["loggers"] or []:
        logger.removeHandler(HANDLER)
        logger.setLevel(level)
        logger.propagate = propagate
    _saved["loggers"] = None


def reset() -> None:
    """Back to the default mode; undo setup()'s redirections (idempotent)."""
    MODE.json = MODE.quiet = MODE.verbose = False
    out.quiet = err.quiet = False
    _warned.clear()
    _uninstall_logging()
    if _saved["stdout"] is not None:
        sys.stdout = _saved["stdout"]
        _saved["stdout"] = None
    if _saved["devnull"] is not None:
        _saved["devnull"].close()
        _saved["devnull"] = None
    if _saved["warnings"] is not None:
        _saved["warnings"].__exit__(None, None, None)
        _saved["warnings"] = None


_python_showwarning = warnings.showwarning
_warned: set[str] = set()  # the featstore warnings shown in this run (reset() empties it)


def _showwarning(message: Any, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
    """featstore's own warnings as one `warning: ...` line on stderr (silent with --quiet),
    each text once per run however many places raise it; any other warning as Python prints
    it."""
    from featstore.errors import FeatstoreWarning

    if issubclass(category, FeatstoreWarning):  # its text as written (no rich markup)
        if str(message) in _warned:
            return
        _warned.add(str(message))
        err.print(f"warning: {message}", highlight=False, markup=False)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


warnings.showwarning = _showwarning


def setup(json_: bool = False, quiet: bool = False, verbose: bool = False) -> Mode:
    """Fix the output mode of this run (the root options and the command's own are OR-ed;
    --quiet wins over --verbose) and install the library's log handler at its level."""
    MODE.json = MODE.json or json_
    MODE.quiet = MODE.quiet or quiet
    MODE.verbose = MODE.verbose or verbose
    _install_logging()
    out.quiet = MODE.json or MODE.quiet
    err.quiet = MODE.quiet
    if (MODE.json or MODE.quiet) and _saved["stdout"] is None:
        # stdout is reserved for emit(): stray writes go to stderr (--json) or nowhere (--quiet)
        _saved["stdout"] = sys.stdout
        if MODE.quiet:
            _saved["devnull"] = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
            sys.stdout = _saved["devnull"]
        else:
            sys.stdout = sys.stderr
    if MODE.quiet and _saved["warnings"] is None:
        caught = warnings.catch_warnings()
        _saved["warnings"] = caught
        caught.__enter__()
        warnings.simplefilter("ignore")
    return MODE


def progress_enabled() -> bool:
    return not MODE.quiet


def _real_stdout() -> IO[str]:
    return _saved["stdout"] if _saved["stdout"] is not None else sys.stdout


def jsonable(obj: Any) -> Any:
    """Plain JSON values: NumPy scalars and arrays as numbers and lists, NaN/inf as null,
    paths and other objects as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def print_json(obj: Any) -> None:
    """Machine output: one JSON document on the real stdout."""
    stream = _real_stdout()
    stream.write(json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")
    stream.flush()


def emit(result: Any, human: Callable[[], None] | None = None) -> None:
    """The end of every command: the JSON document with --json, else the human output
    (nothing with --quiet)."""
    if MODE.json:
        print_json(result)
    elif human is not None and not MODE.quiet:
        human()


def log(message: str) -> None:
    """A progress/log line on stderr (silent with --quiet), as written: the library's
    messages name spec tables in brackets (`[transform]`), never rich markup."""
    err.print(message, highlight=False, markup=False)


# --------------------------------------------------------------------------- progress
class RateColumn(ProgressColumn):
    """Items per second of a task."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if not speed and task.elapsed:
            # rich's speed needs two samples within its window; a bar drawn once (a pipe, a
            # log file: only the final state) or a split done in one update has none: the
            # mean rate over the task, counting only this run's rows (not resumed ones)
            done = task.completed - task.fields.get("resumed", 0)
            speed = done / task.elapsed if done > 0 else None
        if not speed:
            return Text("– img/s", style="cyan")
        # below 10 img/s (a big model on CPU) two significant digits, not a rounded "0"
        return Text(f"{speed:,.0f} img/s" if speed >= 10 else f"{speed:.2g} img/s",
                    style="cyan")


@contextmanager
def run_progress(progress: Progress) -> Iterator[Progress]:
    """Start a Progress; on an error, drop the bars (transient) so that only the one-line
    error remains on stderr."""
    progress.start()
    try:
        yield progress
    except BaseException:
        progress.live.transient = True  # a terminal erases the bars
        if not progress.console.is_terminal:  # a file or pipe gets nothing, not a blank line
            quiet, progress.console.quiet = progress.console.quiet, True
            try:
                progress.stop()
            finally:
                progress.console.quiet = quiet
        raise
    finally:
        if progress.live.is_started:  # Progress.stop prints a newline even when stopped
            progress.stop()


def _progress(*columns: Any) -> Progress:
    return Progress(*columns, console=err, transient=False, redirect_stdout=False,
                    redirect_stderr=False)


@contextmanager
def split_progress(enabled: bool = True) -> Iterator[Any]:
    """A callback progress(split, done, total) drawing one bar per split on stderr
    (extraction: images/s and ETA); None when disabled or with --quiet."""
    if not enabled or not progress_enabled():
        yield None
        return
    progress = _progress(TextColumn("{task.description:<28}", markup=False), BarColumn(),
                         MofNCompleteColumn(), RateColumn(),
                         # a finished bar shows its elapsed time, not a remaining 0:00:00
                         TimeRemainingColumn(elapsed_when_finished=True))
    tasks: dict[str, Any] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total, completed=done, resumed=done)
        progress.update(tasks[name], completed=done, total=total)

    with run_progress(progress):
        yield update


@contextmanager
def step_progress(label: str, enabled: bool = True) -> Iterator[Any]:
    """A callback update(done=None, total=None, description=None) drawing one bar with ETA
    on stderr (only the given fields change); None when disabled or with --quiet."""
    if not enabled or not progress_enabled():
        yield None
        return
    progress = _progress(TextColumn("{task.description}", markup=False), BarColumn(),
                         MofNCompleteColumn(),
                         TimeElapsedColumn(), TimeRemainingColumn())
    task = progress.add_task(label, total=None)

    def update(done: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        fields: dict[str, Any] = {}
        if done is not None:
            fields["completed"] = done
        if total is not None:
            fields["total"] = total
        if description:
            fields["description"] = f"{label}: {description}"
        progress.update(task, **fields)

    with run_progress(progress):
        yield update


class Steps:
    """The step lines of `status()`: call with a label to start the next step."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: list[Any] = []
        self.running: Any = None

    def finish(self) -> None:
        """End the running step (its line keeps its final time)."""
        if self.progress is not None and self.running is not None:
            self.progress.update(self.running, total=1, completed=1)
            self.progress.stop_task(self.running)
            self.running = None

    def __call__(self, label: str) -> None:
        if self.progress is None:
            self.tasks.append(None)
            return
        self.finish()
        self.running = self.progress.add_task(label, total=None, start=True)
        self.tasks.append(self.running)

    @property
    def last(self) -> int:
        """The index of the step begun last (for `relabel`)."""
        return len(self.tasks) - 1

    def relabel(self, index: int, label: str) -> None:
        if self.progress is not None and 0 <= index < len(self.tasks):
            self.progress.update(self.tasks[index], description=label)


@contextmanager
def status(enabled: bool = True) -> Iterator[Steps]:
    """Spinners with elapsed time on stderr, one line per step: `begin(label)` ends the
    previous step (its line keeps its final time) and starts the next (`begin.last` is its
    index); `begin.relabel(index, label)` rewrites a step's line once its outcome is known (a cached
    result, a skipped scorer) before the lines are printed for good. With --quiet (or
    `enabled=False`) both do nothing."""
    if not enabled or not progress_enabled():
        yield Steps(None)
        return
    progress = _progress(SpinnerColumn(finished_text="[green]✓[/]"),
                         TextColumn("{task.description}", markup=False), TimeElapsedColumn())
    steps = Steps(progress)
    with run_progress(progress):
        yield steps
        steps.finish()
