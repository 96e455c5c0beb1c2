"""Tables that fit the terminal: a key column that is never cut, empty columns hidden, and
optional columns dropped (lowest priority first, named in a note) until the table fits the
console's width; `wide=True` keeps every column and prints at the table's natural width.

A column's width is its longest cell or header line (headers may hold a newline: `near` over
`AUROC↑`) plus rich's padding (one space each side) and the one-character separator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

EMPTY = ("", "–")


@dataclass
class Column:
    """One table column: header (may hold '\\n'), plain-text cells, optional per-cell rich
    style, justification; `priority`: lower is dropped later (0: always kept)."""

    header: str
    cells: list[str]
    justify: str = "right"
    priority: int = 1
    styles: list[str | None] = field(default_factory=list)

    def width(self) -> int:
        lines = [*self.header.split("\n"), *self.cells]
        return max(len(s) for s in lines) + 3

    def empty(self) -> bool:
        return all(c in EMPTY for c in self.cells)


def fit_columns(columns: Sequence[Column], width: int,
                wide: bool = False) -> tuple[list[Column], list[Column]]:
    """(shown, hidden): empty columns are dropped; then, unless `wide`, the optional columns
    of the highest `priority` number go first until the sum of widths fits `width`. Column
    order is kept. Priority-0 columns are never dropped."""
    shown = [c for c in columns if c.priority == 0 or not c.empty()]
    hidden: list[Column] = []
    if wide:
        return shown, hidden
    for prio in sorted({c.priority for c in shown if c.priority > 0}, reverse=True):
        while sum(c.width() for c in shown) > width:
            victims = [c for c in shown if c.priority == prio]
            if not victims:
                break
            shown.remove(victims[-1])
            hidden.insert(0, victims[-1])
    return shown, hidden


def build_table(columns: Sequence[Column], title: str | None = None,
                wide: bool = False) -> Table:
    """A rich Table of the columns; the first column is the key: never wrapped or cut (with
    `wide`, no column is)."""
    table = Table(title=title, header_style="bold", show_edge=False)
    for i, col in enumerate(columns):
        key = i == 0
        table.add_column(col.header, justify="left" if key else col.justify,  # type: ignore[arg-type]
                         no_wrap=key or wide, min_width=col.width() - 3 if key else None)
    n = len(columns[0].cells) if columns else 0
    for r in range(n):
        row = []
        for col in columns:
            style = col.styles[r] if r < len(col.styles) else None
            row.append(Text(col.cells[r], style=style or ""))
        table.add_row(*row)
    return table


def print_fitted(console: Console, columns: Sequence[Column], title: str | None = None,
                 wide: bool = False) -> list[Column]:
    """Print the table fitted to the console's width (or, `wide`, at its natural width);
    returns the columns hidden to fit."""
    shown, hidden = fit_columns(columns, console.width, wide)
    table = build_table(shown, title, wide)
    if wide:
        natural = Measurement.get(console, console.options.update(max_width=10_000),
                                  table).maximum
        saved = console.width  # Console.print caps a width at the console's: widen it
        console.width = max(natural, saved)
        try:
            console.print(table)
        finally:
            console.width = saved
    else:
        console.print(table)
    return hidden


def hidden_note(hidden: Sequence[Column]) -> str | None:
    """'hidden to fit the terminal: AURC↓, AUGRC↓ (--wide shows every column)' or None."""
    if not hidden:
        return None
    names = ", ".join(c.header.replace("\n", " ") for c in hidden)
    return f"hidden to fit the terminal: {names} (--wide shows every column)"
