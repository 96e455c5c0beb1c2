"""The scorer catalogue as text: what `featstore scorers` prints and the README's scorer table,
both generated from the one registry (`scorers.list_scorers()`), never kept by hand.

The README holds the table between the `BEGIN` and `END` markers; `python -m scorers.catalog
README.md` rewrites that block from the registry, and `--check` exits 1 (naming the first
differing line) when the README's block is not what the registry gives (tests run it).

Values are written as `featstore ... --param k=v` takes them: numbers and strings bare,
`true` / `false`, `null` for None.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.store.fileio import atomic_write_bytes

from . import list_scorers

BEGIN = ("<!-- scorers table: generated from scorers.list_scorers() by "
         "`python -m scorers.catalog README.md`; do not edit by hand -->")
END = "<!-- end of the generated scorers table -->"
COLUMNS = ("scorer", "needs", "defaults", "sweep grid", "paper")


def format_value(value: Any) -> str:
    """A parameter value as the command line takes it: `50`, `exact`, `true`, `null`."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def format_params(params: Mapping[str, Any]) -> str:
    """`K=50, index=exact` (key order kept); `–` when there are none."""
    return ", ".join(f"{k}={format_value(v)}" for k, v in params.items()) or "–"


def format_grid(grid: Mapping[str, Sequence[Any]]) -> str:
    """`K=50,100,200` per swept parameter, `; `-separated; `–` when nothing is swept."""
    return "; ".join(f"{k}={','.join(format_value(v) for v in values)}"
                     for k, values in grid.items()) or "–"


def format_paper(info: Mapping[str, Any], markdown: bool = False) -> str:
    """The citation, then the paper's and the official code's links where known (`paper_meta`):
    Markdown links in the README, plain URLs on the terminal."""
    meta = info.get("paper_meta") or {}
    links = [(label, meta.get(key)) for label, key in (("paper", "url"), ("code", "code"))
             if meta.get(key)]
    if markdown:
        return " · ".join([info["paper"], *(f"[{label}]({url})" for label, url in links)])
    return "\n".join([info["paper"], *(f"{label}: {url}" for label, url in links)])


def catalog_rows(infos: Sequence[Mapping[str, Any]],
                 markdown: bool = False) -> list[tuple[str, ...]]:
    """One row of text per scorer, in COLUMNS order, from `list_scorers()` entries."""
    return [(info["name"], ", ".join(info["needs"]), format_params(info["defaults"]),
             format_grid(info["grid"]), format_paper(info, markdown)) for info in infos]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(infos: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of `infos` (scorer names in backticks), ending with a newline."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name, *rest in catalog_rows(infos, markdown=True):
        lines.append("| " + " | ".join([f"`{name}`", *(_cell(c) for c in rest)]) + " |")
    return "\n".join(lines) + "\n"


def replace_block(text: str, table: str, where: str = "README") -> str:
    """`text` with the lines between BEGIN and END replaced by `table`; ValueError naming
    `where` when the markers are missing or out of order."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"{where}: no generated scorers table (expected the lines {BEGIN!r} "
                         f"and {END!r}, in that order)")
    head = text[:start + len(BEGIN)]
    return f"{head}\n{table}{text[end:]}"


def first_difference(old: str, new: str) -> str | None:
    """`line N: 'old' != 'new'` for the first differing line, or None when equal."""
    a, b = old.splitlines(), new.splitlines()
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "<missing>"
        y = b[i] if i < len(b) else "<missing>"
        if x != y:
            return f"line {i + 1}: {x!r} != {y!r}"
    return None


def update_file(path: Path, infos: Sequence[Mapping[str, Any]], check: bool = False) -> str | None:
    """Rewrite `path`'s generated block from `infos` (atomically); with `check`, write nothing
    and return the first difference (None when the file is up to date)."""
    text = path.read_text(encoding="utf-8")
    new = replace_block(text, markdown_table(infos), str(path))
    diff = first_difference(text, new)
    if not check and diff is not None:
        atomic_write_bytes(path, new.encode("utf-8"))
    return diff


def main(argv: list[str] | None = None) -> int:
    """`python -m scorers.catalog [--check] README.md`: 0 up to date or rewritten; 1 with
    --check when the file differs from the registry."""
    parser = argparse.ArgumentParser(prog="python -m scorers.catalog", description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true",
                        help="only compare; exit 1 when the block differs from the registry")
    args = parser.parse_args(argv)
    diff = update_file(args.path, list_scorers(builtin_only=True), check=args.check)
    if diff is None:
        print(f"{args.path}: the scorers table matches the registry")
        return 0
    if args.check:
        print(f"{args.path}: the scorers table differs from scorers.list_scorers() ({diff}); "
              f"run `python -m scorers.catalog {args.path}`", file=sys.stderr)
        return 1
    print(f"{args.path}: rewrote the scorers table from the registry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
