"""`featstore scorers`: every registered scorer with its needs, defaults, sweep grid and paper."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from .console import JsonOpt, QuietOpt, emit, out, setup


def print_scorers(infos: list[dict[str, Any]]) -> None:
    """The registry as a table (the README's, `scorers.catalog`)."""
    from scorers.catalog import COLUMNS, catalog_rows

    table = Table(title=f"{len(infos)} registered scorers (higher score = more ID)",
                  header_style="bold", show_edge=False)
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in catalog_rows(infos):
        table.add_row(*row)
    out.print(table, highlight=False, markup=False)


def scorers(json_: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Every registered scorer: name, needs (features, logits, head, fit:<split>,
    extra:<name>), default parameters, default sweep grid and paper.

    Example: featstore scorers --json
    """
    setup(json_, quiet)
    from scorers import list_scorers

    infos = list_scorers()
    emit(infos, lambda: print_scorers(infos))


def register(app: typer.Typer) -> None:
    app.command("scorers")(scorers)
