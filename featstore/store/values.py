"""Value checks of the store core (DESIGN §9): non-finite features / logits and float16 range.

`nonfinite_record(fh)` streams a split file's floating datasets once (at commit) and records,
per dataset with any NaN or inf, the number of rows holding one and the first few of them;
the manifest keeps the record, so the checks at fit and score time (`require_finite`) cost a
dictionary lookup instead of a pass over the data. The record is not trusted alone: every
row-chunk reader (`Split.read`, `Split.read_into`, hence `iter_chunks` and
`scorers.rowmap.map_rows`; the same for `ArraySplit`) runs `check_read_finite` on each floating
chunk it has just read, one `np.isfinite(chunk).all()` (0.17 ms per 8 MB float32 chunk against
0.25 ms to copy it, load 1.1), so a file whose NaN / inf the record does not list (changed
after commit with the manifest made to agree) is an error naming the split, the field and the
rows, not a score. Float16 holds magnitudes up to 65504: a finite float32 value beyond that
would silently become inf, so writing one is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from featstore.errors import InputError
from featstore.store.layout import ROW_AXIS_ATTR, extra_names

FIRST_ROWS = 5
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504
_CHUNK_BYTES = 16 << 20


class NonFiniteError(InputError):
    """NaN or inf in the features or logits a scorer would read (exit code 1)."""


def _bad_rows(arr: np.ndarray, row_axis: int = 0) -> np.ndarray:
    """Indices (along `row_axis`) of rows of `arr` holding a NaN or inf."""
    bad = ~np.isfinite(arr)
    other = tuple(a for a in range(arr.ndim) if a != row_axis)
    return np.flatnonzero(bad.any(axis=other) if other else bad)


def nonfinite_record(fh: h5py.File) -> dict[str, list]:
    """{field: [rows with NaN/inf, first FIRST_ROWS such rows]} for every floating dataset
    of a split file that has any (fields `features`, `logits`, `extra:<name>`); {} when all
    finite."""
    record: dict[str, list] = {}
    keys = [k for k in ("features", "logits") if k in fh]
    keys += [f"extra/{n}" for n in extra_names(fh)]
    for key in keys:
        ds = fh[key]
        if ds.dtype.kind != "f" or ds.size == 0:
            continue
        axis = int(ds.attrs.get(ROW_AXIS_ATTR, 0)) if key.startswith("extra/") else 0
        rows = ds.shape[axis]
        row_bytes = max(1, ds.size // max(rows, 1) * ds.dtype.itemsize)
        step = max(1, _CHUNK_BYTES // row_bytes)
        count = 0
        first: list[int] = []
        for start in range(0, rows, step):
            index = (slice(None),) * axis + (slice(start, min(rows, start + step)),)
            bad = _bad_rows(ds[index], axis) + start
            count += int(bad.size)
            first.extend(int(r) for r in bad[: FIRST_ROWS - len(first)])
        if count:
            record[f"extra:{key[len('extra/'):]}" if key.startswith("extra/") else key] = \
                [count, first]
    return record


def nonfinite_message(store_path: Any, split: str, field: str, rows: int, count: int,
                      first: Sequence[int], what: str) -> str:
    shown = ", ".join(map(str, first)) + (", ..." if count > len(first) else "")
    return (f"store {str(store_path)!r}: split {split!r}: {count} of {rows} rows of {field} "
            f"hold NaN or inf (rows {shown}); {what} would be meaningless. Re-extract or fix "
            "the split")


def require_finite(split: Any, fields: Sequence[str], what: str) -> None:
    """NonFiniteError naming the split, the field, the row count and the first rows if any
    of `fields` of `split` (a featstore Split) holds NaN or inf; a field `extra:<group>`
    covers every extra array under the group."""
    record = split.nonfinite_record()
    for field in fields:
        for key in sorted(record):
            if key == field or key.startswith(field + "/"):
                count, first = record[key]
                raise NonFiniteError(nonfinite_message(split._store.path, split.name, key,
                                                       split.num_rows, int(count), first, what),
                                     change={"allow_nonfinite": True},
                                     effect="to score the values as they are")


def field_key(dataset_path: str) -> str:
    """The record's field name of a split file's dataset path: `/features` -> `features`,
    `/extra/odin_logits/0.001` -> `extra:odin_logits/0.001`."""
    key = dataset_path.lstrip("/")
    return f"extra:{key[len('extra/'):]}" if key.startswith("extra/") else key


def check_read_finite(split: Any, field: str, chunk: np.ndarray, start: int,
                      row_axis: int = 0) -> None:
    """The read-time check (module docstring): NonFiniteError if `chunk`, rows `start`.. of
    `field` of `split` (as read, along `row_axis`), holds NaN or inf that the split's record
    (`split.nonfinite_record()`) does not list for `field`. A field the record lists passes:
    `require_finite` (before any read) is then the gate, which --allow-nonfinite opens. An
    unlisted one is an error even with --allow-nonfinite: the file is not what was committed."""
    if chunk.dtype.kind != "f" or chunk.size == 0 or np.isfinite(chunk).all():
        return
    if field in split.nonfinite_record():
        return
    bad = _bad_rows(chunk, row_axis) + start
    stop = start + chunk.shape[row_axis] - 1
    shown = ", ".join(map(str, bad[:FIRST_ROWS])) + (", ..." if bad.size > FIRST_ROWS else "")
    raise NonFiniteError(
        f"store {str(split._store.path)!r}: split {split.name!r}: rows {shown} of {field} "
        f"({bad.size} of rows {start}..{stop} read) hold NaN or inf that the split's record "
        "of non-finite rows (made at commit) does not list: the file changed after it was "
        "committed, and no score of it would be meaningful. Re-extract or fix the split")


def check_float16_range(split: str, field: str, values: np.ndarray, first_row: int = 0) -> None:
    """UsageError if finite `values` exceed float16's range (they would become inf)."""
    arr = np.asarray(values)
    if arr.dtype == np.float16 or arr.size == 0:
        return
    over = np.isfinite(arr) & (np.abs(arr) > FLOAT16_MAX)
    if over.any():
        rows = _bad_rows(np.where(over, np.inf, 0.0)) + first_row
        shown = ", ".join(map(str, rows[:FIRST_ROWS])) + (", ..." if rows.size > FIRST_ROWS
                                                          else "")
        raise InputError(f"split {split!r}: {int(over.sum())} {field} value(s) in {rows.size} "
                         f"row(s) (rows {shown}) exceed float16's range (|x| <= 65504, largest "
                         f"{float(np.abs(arr[over]).max()):.6g}) and would become inf; use "
                         "--dtype float32")
