"""`ArrayStore`: an in-memory store over NumPy arrays or torch tensors, with the reader API of
`Store` / `Split` (`featstore.store.interfaces.StoreLike` / `SplitLike`), so every scorer,
`evaluate`, `sweep` and `compare` run on arrays without writing HDF5:

    from featstore import ArrayStore
    st = ArrayStore(head=(W, b), splits={"id/train": {"features": F, "labels": y}, ...})

Each split's arrays go through the same normalization as `Store.from_arrays`
(`featstore.store.splitarrays.prepare_split`: float32 or float16 features, float32 logits computed
from the head when absent, int64 labels), so the same arrays score the same either way. With
`head=None` every split must carry logits, and scorers that need the head are skipped with
the reason. The model digest is the head's (as `Store.from_arrays` records it), or
`model_sha256` when given; without a head and without it, a digest of each split's shape and
first rows. Nothing is cached (there is no scores.h5); nothing is copied beyond the dtype
conversions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.fileio import sha256_arrays
from featstore.store.names import parse_split_name
from featstore.store.reader import DEFAULT_CHUNK_ROWS
from featstore.store.splitarrays import SplitArrays, prepare_head, prepare_split
from featstore.store.values import _bad_rows, check_read_finite

FIRST_ROWS = 10
MEMORY_PATH = Path("<in-memory ArrayStore>")


def _nonfinite(fields: Mapping[str, tuple[np.ndarray, int]]) -> dict[str, list[Any]]:
    """{field: [rows holding NaN/inf, first such rows]} (`featstore.store.values`' record)."""
    record: dict[str, list[Any]] = {}
    for key, (arr, axis) in fields.items():
        if arr.dtype.kind != "f" or arr.size == 0:
            continue
        bad = _bad_rows(arr, axis)
        if bad.size:
            record[key] = [int(bad.size), [int(r) for r in bad[:FIRST_ROWS]]]
    return record


class ArraySplit:
    """One in-memory split: the `SplitLike` reader API over arrays."""

    def __init__(self, store: ArrayStore, arrays: SplitArrays):
        parsed = parse_split_name(arrays.name)
        self._store = store
        self._arrays = arrays
        self.name = arrays.name
        self.role = parsed.role
        self.group = parsed.group
        self.usage = arrays.usage
        self.num_rows = int(arrays.features.shape[0])
        self.dims = {"features": int(arrays.features.shape[1]),
                     "logits": int(arrays.logits.shape[1])}
        self.dtype = str(arrays.features.dtype)
        fields = {"features": (arrays.features, 0), "logits": (arrays.logits, 0),
                  **{f"extra:{k}": (v, arrays.row_axes[k]) for k, v in arrays.extras.items()}}
        self.entry: dict[str, Any] = {
            "name": self.name, "role": self.role, "group": self.group, "usage": self.usage,
            "num_rows": self.num_rows, "dims": dict(self.dims), "dtype": self.dtype,
            "extras": {k: list(v.shape) for k, v in arrays.extras.items()},
            "nonfinite": _nonfinite(fields), "complete": True, "file": None, "sha256": None}

    def __repr__(self) -> str:
        return (f"ArraySplit({self.name!r}, rows={self.num_rows}, dims={self.dims}, "
                f"dtype={self.dtype})")

    @property
    def path(self) -> Path:
        return MEMORY_PATH

    @property
    def model_sha256(self) -> str:
        return self._store.model_sha256

    def nonfinite_record(self) -> dict[str, list[Any]]:
        record: dict[str, list[Any]] = self.entry["nonfinite"]
        return record

    @property
    def features(self) -> np.ndarray:
        return self._arrays.features

    @property
    def logits(self) -> np.ndarray:
        return self._arrays.logits

    @property
    def labels(self) -> np.ndarray:
        return self._arrays.labels

    @property
    def ids(self) -> np.ndarray:
        return self._arrays.ids

    def extra_names(self) -> list[str]:
        return sorted(self._arrays.extras)

    def has_extra(self, name: str) -> bool:
        return any(n == name or n.startswith(name + "/") for n in self._arrays.extras)

    def extra(self, name: str) -> np.ndarray:
        if name not in self._arrays.extras:
            avail = ", ".join(self.extra_names()) or "none"
            raise UsageError(f"split {self.name!r} has no extra {name!r} (available: {avail})")
        return self._arrays.extras[name]

    def extra_row_axis(self, name: str) -> int:
        self.extra(name)
        return self._arrays.row_axes[name]

    def iter_chunks(self, *fields: str, chunk_rows: int = DEFAULT_CHUNK_ROWS
                    ) -> Iterator[tuple[slice, tuple[np.ndarray, ...]]]:
        """(row slice, arrays) for the named fields in row chunks; floats as float32."""
        fields = fields or ("features",)
        for start in range(0, self.num_rows, chunk_rows):
            rows = slice(start, min(start + chunk_rows, self.num_rows))
            yield rows, tuple(self.read(f, rows) for f in fields)

    def dataset(self, field: str) -> np.ndarray:
        if field in ("features", "logits", "labels"):
            array: np.ndarray = getattr(self._arrays, field)
            return array
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            if self.extra_row_axis(name) != 0:
                raise UsageError(f"extra {name!r} of split {self.name!r} is not row-major; "
                                 "read it with Split.read")
            return self.extra(name)
        raise UsageError(
            f"unknown field {field!r}; expected features, logits, labels or extra:<name>")

    def read_into(self, ds: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        if stop > start:
            out[:stop - start] = ds[start:stop]
            check_read_finite(self, self._field_of(ds), out[:stop - start], start)

    def _field_of(self, ds: np.ndarray) -> str:
        """The field name of one of this split's arrays (by identity)."""
        for field in ("features", "logits", "labels"):
            if ds is getattr(self._arrays, field):
                return field
        return next((f"extra:{k}" for k, v in self._arrays.extras.items() if v is ds),
                    "an array")

    def read(self, field: str, rows: slice | None = None) -> np.ndarray:
        """A field (optionally a row slice), floating arrays as float32 (a copy when cast)."""
        rows = rows if rows is not None else slice(None)
        axis = 0
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            axis = self.extra_row_axis(name)
            arr = self.extra(name)[(slice(None),) * axis + (rows,)]
        elif field in ("features", "logits", "labels"):
            arr = getattr(self._arrays, field)[rows]
        else:
            raise UsageError(
                f"unknown field {field!r}; expected features, logits, labels or extra:<name>")
        check_read_finite(self, field, arr, rows.indices(self.num_rows)[0], axis)
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        return arr


class ArrayStore:
    """An in-memory store (module docstring): `ArrayStore(head=(W, b) | None, splits={name:
    {"features", "logits", "labels", "ids", "extras", "usage"}}, dtype="float32")`."""

    def __init__(self, head: tuple[Any, Any] | None = None, *,
                 splits: Mapping[str, Mapping[str, Any]], dtype: str = "float32",
                 model_sha256: str | None = None, classes: list[str] | None = None):
        self.path = MEMORY_PATH
        self._head = prepare_head(head) if head is not None else None
        self._splits: dict[str, ArraySplit] = {}
        for name, arrays in splits.items():
            extra = set(arrays) - {"features", "logits", "labels", "ids", "extras", "usage",
                                   "source"}
            if extra:
                raise UsageError(f"split {name!r}: unknown key {sorted(extra)[0]!r} (valid: "
                                 "features, logits, labels, ids, extras, usage, source)")
            given = {k: v for k, v in arrays.items() if k != "source"}
            self._splits[name] = ArraySplit(self, prepare_split(name, self._head, dtype=dtype,
                                                                **given))
        dims = {s.dims["logits"] for s in self._splits.values()}
        if len(dims) > 1:
            raise UsageError(f"splits disagree on the number of classes: {sorted(dims)}")
        self._sha = model_sha256 or self._digest()
        count = len(self._head[1]) if self._head is not None else next(iter(dims), 0)
        self.classes = list(classes) if classes is not None else [str(i) for i in range(count)]
        self.manifest: dict[str, Any] = {
            "model": {"sha256": self._sha}, "num_classes": count, "in_memory": True,
            "feature_dim": next(iter({s.dims["features"] for s in self._splits.values()}), 0),
            "splits": {n: s.entry for n, s in self._splits.items()}}

    def _digest(self) -> str:
        if self._head is not None:
            return sha256_arrays({"weight": self._head[0], "bias": self._head[1]})
        h = hashlib.sha256(b"featstore ArrayStore without a head")
        for name, split in sorted(self._splits.items()):
            h.update(name.encode())
            for arr in (split.features[:64], split.logits[:64]):
                h.update(str(arr.shape).encode() + np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"ArrayStore(splits={list(self._splits)})"

    def __enter__(self) -> ArrayStore:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        """Nothing to release (kept for the Store API)."""

    @property
    def model_sha256(self) -> str:
        return self._sha

    @property
    def head(self) -> tuple[np.ndarray, np.ndarray]:
        if self._head is None:
            raise FeatstoreError("this ArrayStore has no head (W, b); pass head=(W, b) for "
                                 "scorers that need it")
        return self._head

    def splits(self, role: str | None = None, usage: str | None = None) -> list[str]:
        return [n for n, s in self._splits.items()
                if (role is None or s.role == role) and (usage is None or s.usage == usage)]

    def has_split(self, name: str) -> bool:
        return name in self._splits

    def split(self, name: str) -> ArraySplit:
        if name not in self._splits:
            raise UsageError(f"ArrayStore has no split {name!r} (splits: "
                             f"{', '.join(self._splits) or 'none'})")
        return self._splits[name]

    def check_committed(self, name: str) -> None:
        self.split(name)
