"""Result files in the format their name asks for: `--out x.csv` writes CSV, `x.jsonl` JSON
lines (one object per row), `x.json` (or no suffix) the command's JSON document. Rows are flat
records (`scorers.tabular.records`, or the per-row scores of `score --save`); every file is
written atomically (`featstore.store.fileio.atomic_write_output`).

CSV: RFC 4180 through Python's `csv` module (comma, `\\r\\n` line ends, quotes only where
needed), the header the union of the rows' keys in first-seen order, an empty cell for a
missing key or None, floats by `repr` (round-trips exactly), `nan` / `inf` as Python writes
them. JSON lines: `json.dumps` of each row, non-finite floats as NaN / Infinity as Python's
json writes them (the round trip is exact; strict JSON readers refuse them, as in the .json
documents)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.store.fileio import atomic_write_output

# suffix -> format: a result's --out (eval, sweep, compare) and per-row scores (score --save)
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", "": "json"}
SCORE_FORMATS = {".npz": "npz", "": "npz", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def output_format(path: str | Path, option: str = "--out",
                  formats: Mapping[str, str] = FORMATS) -> str:
    """The format named by `path`'s suffix in `formats` ("csv", "jsonl", "json", ...);
    UsageError naming the option and the valid suffixes for any other suffix (a `.csv` never
    holds JSON, a `.parquet` is never written as something else)."""
    known = formats
    suffix = Path(path).suffix.lower()
    if suffix not in known:
        valid = ", ".join(sorted(s for s in known if s))
        raise UsageError(f"{option} {str(path)!r}: unknown file type {suffix!r}; expected "
                         f"one of {valid}")
    return known[suffix]


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of `rows`, in the order of first appearance."""
    return list(dict.fromkeys(k for row in rows for k in row))


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """`rows` as CSV text (module docstring)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns(rows), restval="")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def jsonl_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """`rows` as JSON lines."""
    return "".join(json.dumps(dict(row)) + "\n" for row in rows)


def write_rows(path: str | Path, rows: Sequence[Mapping[str, Any]], fmt: str) -> Path:
    """Write `rows` as "csv" or "jsonl" to `path`, atomically."""
    if fmt == "csv":
        return atomic_write_output(path, csv_text(rows))
    if fmt == "jsonl":
        return atomic_write_output(path, jsonl_text(rows))
    raise ValueError(f"write_rows: format {fmt!r} is not csv or jsonl")


__all__ = ["FORMATS", "SCORE_FORMATS", "columns", "csv_text", "jsonl_text", "output_format",
           "write_rows"]
