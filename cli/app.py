"""Entry point: the typer app and the error boundary (one-line errors, exit codes).

Exit codes: 0 success; 2 the command line is wrong (unknown command or option, a bad option
value, an unknown method / parameter / target, a split name the store does not hold); 1 what
it names is missing or broken (a missing or corrupt store, a missing or unreadable file, bad
TOML / JSON content, an empty split) or the run failed; 130 interrupted. Every error is one
line on stderr starting with `error:`; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from rich.text import Text
from typer.exceptions import Abort, TyperException

from featstore.errors import FeatstoreError, use_wording
from featstore.store import interrupts
from featstore.store.textsafe import one_line

from . import (
    commands_compare,
    commands_facets,
    commands_gscore,
    commands_openood,
    commands_predict,
    commands_protocol,
    commands_report,
    commands_run,
    commands_score,
    commands_scorers,
    commands_store,
    commands_sweep,
    commands_tenmethods,
    commands_train,
)
from .console import JsonOpt, QuietOpt, errors, escape_help, reset, setup
from .wording import CLI_WORDING

try:  # typer >= 0.24 vendors click as typer._click; older typer raises click's own exceptions
    from typer._click.exceptions import NoArgsIsHelpError
except ImportError:  # pragma: no cover
    from click.exceptions import NoArgsIsHelpError  # type: ignore[assignment]
try:
    import click as _click

    _CLICK_ERRORS: tuple[type[BaseException], ...] = (TyperException, _click.ClickException)
    _ABORTS: tuple[type[BaseException], ...] = (Abort, _click.exceptions.Abort)
except ImportError:  # pragma: no cover
    _CLICK_ERRORS, _ABORTS = (TyperException,), (Abort,)

app = typer.Typer(
    name="featstore",
    help="Extract once, score everything: an HDF5 feature cache for OOD detection.\n\n"
         "Global options (before or after the command): --json (one JSON document on "
         "stdout), -q/--quiet (only errors and warnings), -v/--verbose (debug logs too), "
         "--debug (tracebacks). Exit codes: 0 ok, 1 failure "
         "(missing/corrupt store or file, bad TOML/JSON, empty split), 2 bad command line.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        from featstore.version import __version__

        print(f"featstore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", help="Print featstore's version and exit.", is_eager=True,
        callback=_print_version)] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show the library's debug logs too (log level DEBUG; the "
                                "default is INFO, --quiet WARNING).")] = False,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show the traceback of an error instead of one line.")] = False,
) -> None:
    # --debug and --verbose are taken out of the arguments by main() (anywhere on the line);
    # declared here for --help. --json / --quiet here apply to the command that follows.
    setup(json_, quiet, verbose)


commands_store.register(app)
commands_score.register(app)
commands_scorers.register(app)
commands_sweep.register(app)
commands_gscore.register(app)
commands_train.register(app)
commands_protocol.register(app)
commands_tenmethods.register(app)
commands_facets.register(app)
commands_openood.register(app)
commands_report.register(app)
commands_run.register(app)
commands_compare.register(app)
commands_predict.register(app)


def _command() -> Any:
    """The app as click runs it (what `app(...)` builds), its help texts' brackets escaped
    for typer's rich markup (`cli.console.escape_help`); shell completion, which prints the
    help texts raw, gets them unescaped."""
    command = typer.main.get_command(app)
    return command if "_FEATSTORE_COMPLETE" in os.environ else escape_help(command)


def _error(message: str) -> None:
    errors.print(Text.assemble(("error: ", "bold red"), one_line(" ".join(message.split("\n")))),
                 highlight=False, soft_wrap=True)


def _click_error(exc: Any) -> str:
    """One line for a click usage error: the command, what was wrong, where to look."""
    message = " ".join(line.strip() for line in exc.format_message().splitlines()
                       if line.strip())
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        return f"{ctx.command_path}: {message} (see `{ctx.command_path} --help`)"
    return message


PIPED_HELP_WIDTH = 120  # help boxes when stdout is no terminal (rich's default there is 80)
_TYPER_WIDTH: list[int | None] = []  # typer's own MAX_WIDTH ($TERMINAL_WIDTH), read once


def _help_width() -> None:
    """Help piped into a file or a pager keeps readable boxes: rich would squash them to 80
    columns there; a terminal's own width, $COLUMNS or $TERMINAL_WIDTH (typer's) win. Decided
    anew for every run of `main` (the same process may run it on a terminal and a pipe)."""
    import os

    from typer import rich_utils

    if not _TYPER_WIDTH:
        _TYPER_WIDTH.append(rich_utils.MAX_WIDTH)
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    own = _TYPER_WIDTH[0]
    rich_utils.MAX_WIDTH = own if own is not None or not piped else PIPED_HELP_WIDTH


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; FeatstoreError -> one line on stderr and its exit code (2 usage, 1 failure)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _help_width()
    debug = "--debug" in args
    while "--debug" in args:
        args.remove("--debug")
    verbose = any(a in ("-v", "--verbose") for a in args)
    args = [a for a in args if a not in ("-v", "--verbose")]
    reset()
    setup(verbose=verbose)
    interrupts.install()
    try:
        # not standalone: click's usage errors come here and become one line; shell
        # completion (`--show-completion`, `--install-completion`, _FEATSTORE_COMPLETE) and
        # --help exit by themselves
        with use_wording(CLI_WORDING):  # library errors and hints name options (cli.wording)
            rv = _command()(args=args, prog_name="featstore", standalone_mode=False)
        interrupts.raise_if_interrupted()  # a Ctrl-C swallowed on the way is still 130
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except BaseException as exc:
        if interrupts.interrupted() or isinstance(exc, KeyboardInterrupt):
            # whatever came out (a Ctrl-C inside a C extension can surface as a SystemError,
            # an OSError, a KeyError), an interrupted command exits 130
            errors.print("interrupted")
            sys.exit(130)
        _boundary(exc, debug)
    finally:
        interrupts.uninstall()
        reset()


def _boundary(exc: BaseException, debug: bool) -> None:
    """Exit with the one-line error and exit code of `exc` (re-raised with --debug)."""
    try:
        raise exc
    except NoArgsIsHelpError as exc:  # `featstore`, `featstore gscore`: typer printed the help
        sys.exit(exc.exit_code)
    except _CLICK_ERRORS as exc:  # usage errors found by the parser: one line, exit 2
        if debug:
            raise
        _error(_click_error(exc))
        sys.exit(getattr(exc, "exit_code", 2))
    except _ABORTS:
        _error("aborted")
        sys.exit(1)
    except FeatstoreError as exc:
        if debug:
            raise
        _error(exc.worded(CLI_WORDING))
        sys.exit(exc.exit_code)
    except ImportError as exc:  # a library that cannot load (e.g. torch under `ulimit -v`)
        if debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, ModuleNotFoundError):
            _error(f"{first}: install it (pip install {(exc.name or '').split('.')[0]})")
        else:
            _error(f"cannot load module {exc.name or 'of a library'!r} ({first}); under a "
                   "memory limit (ulimit -v) raise the limit, else reinstall it")
        sys.exit(1)
    except OSError as exc:  # the filesystem refused: name the file and the reason
        if debug:
            raise
        where = f"{str(exc.filename)!r}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or str(exc).splitlines()[0]} (check the path, its "
               "permissions and the free space)")
        sys.exit(1)
    except RecursionError:  # a file nested deeper than a recursive reader goes (JSON, TOML)
        if debug:
            raise
        _error("an input is nested too deep to read (RecursionError): check the files the "
               "command names (rerun with --debug for the traceback)")
        sys.exit(1)
    except Exception as exc:  # the last line of defence: no raw traceback without --debug
        if debug:
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        _error(f"unexpected {type(exc).__name__}: {msg} (rerun with --debug for the "
               "traceback)")
        sys.exit(1)


if __name__ == "__main__":
    main()
