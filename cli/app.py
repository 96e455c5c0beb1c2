"""Entry point: the typer app and the error boundary (one-line errors, exit codes)."""

from __future__ import annotations

import sys

import typer
from rich.text import Text

from featstore.errors import FeatstoreError

from . import (
    commands_gscore,
    commands_protocol,
    commands_report,
    commands_score,
    commands_store,
    commands_sweep,
    commands_train,
)
from .console import err

app = typer.Typer(
    name="featstore",
    help="Extract once, score everything: an HDF5 feature cache for OOD detection.\n\n"
         "Global option: --debug shows tracebacks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
commands_store.register(app)
commands_score.register(app)
commands_sweep.register(app)
commands_gscore.register(app)
commands_train.register(app)
commands_protocol.register(app)
commands_report.register(app)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; FeatstoreError -> one line on stderr and its exit code (2 usage, 1 failure)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    try:
        # standalone mode: typer prints usage errors itself (exit 2) and exits via SystemExit
        app(args=args, prog_name="featstore")
    except FeatstoreError as exc:
        if debug:
            raise
        err.print(Text.assemble(("error: ", "bold red"), str(exc)), highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # the last line of defence: no raw traceback without --debug
        if debug:
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        err.print(Text.assemble(("error: ", "bold red"), f"unexpected {type(exc).__name__}: "
                                f"{msg} (rerun with --debug for the traceback)"),
                  highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
