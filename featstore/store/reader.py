"""Reading one split of a store (DESIGN §2-§3): `Split`, whose arrays are lazy h5py datasets.

A split file is opened only after `Store.check_committed` (featstore.store.verify) has found it to
be the file committed for the split, and its structure has passed
`featstore.store.verify.split_file_problem` (shapes against the manifest and the head, no links);
every read error names the store and the split and says to re-extract it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np

from featstore.errors import InputError, UsageError
from featstore.store.layout import ROW_AXIS_ATTR, extra_names
from featstore.store.values import check_read_finite, field_key, nonfinite_record
from featstore.store.verify import split_file_problem

DEFAULT_CHUNK_ROWS = 8192
# HDF5's chunk cache per open dataset of a split file: off. Every featstore reader reads runs
# of rows that span whole 1 MB chunks (`featstore.store.layout.CHUNK_BYTES`; scorers.rowmap's read
# chunks are whole numbers of them when one field is read), so a chunk is never read twice and
# the cache only added a 1 MB slot allocated and freed per chunk and a copy out of it (a page
# fault per fresh page on a process's first pass). A
# read of part of a chunk reads that whole chunk.
CHUNK_CACHE_BYTES = 0


class SplitOwner(Protocol):
    """What a `Split` reads of its store (`featstore.store.store.Store`): the directory, the
    manifest, the model digest, and the committed-file check run before a file is opened."""

    path: Path
    manifest: dict[str, Any]

    @property
    def model_sha256(self) -> str: ...

    def check_committed(self, name: str) -> None: ...


class Split:
    """One split of a store; arrays are lazy h5py datasets (np.asarray(...) loads them)."""

    def __init__(self, store: SplitOwner, entry: Mapping[str, Any]):
        self._store = store
        self.entry = dict(entry)
        self.name: str = entry["name"]
        self.role: str = entry["role"]
        self.group: str | None = entry.get("group")
        self.usage: str = entry.get("usage", "test")
        self.num_rows: int = int(entry["num_rows"])
        self.dims: dict[str, int] = dict(entry["dims"])
        self.dtype: str = entry["dtype"]
        self._fh: h5py.File | None = None
        self._datasets: dict[str, h5py.Dataset] = {}  # open datasets of _fh, by HDF5 path
        self._row_axes: dict[str, int] = {}  # extras' row axis attribute, per open file

    def __repr__(self) -> str:
        return f"Split({self.name!r}, rows={self.num_rows}, dims={self.dims}, dtype={self.dtype})"

    @property
    def path(self) -> Path:
        return self._store.path / str(self.entry["file"])

    @property
    def model_sha256(self) -> str:
        """The digest of the model whose outputs this split holds (its store's)."""
        return self._store.model_sha256

    def _where(self) -> str:
        return f"store {str(self._store.path)!r}: split {self.name!r}"

    def _broken(self, what: str) -> InputError:
        return InputError(f"{self._where()}: {what}; check it with `featstore info --verify` "
                          "and re-extract the split")

    def _file(self) -> h5py.File:
        if self._fh is None or not self._fh.id.valid:
            self._datasets = {}
            self._row_axes = {}
            self._store.check_committed(self.name)
            try:
                fh = h5py.File(self.path, "r", rdcc_nbytes=CHUNK_CACHE_BYTES)
            except OSError as exc:
                raise self._broken(f"unreadable file {str(self.path)!r} ({exc})") from exc
            try:
                problem = split_file_problem(fh, self.entry, self._store.manifest)
            except Exception as exc:  # a file too damaged to inspect
                problem = f"unreadable structure ({type(exc).__name__}: {exc})"
            if problem:
                fh.close()
                raise self._broken(f"file {str(self.path)!r}: {problem}")
            self._fh = fh
        return self._fh

    def nonfinite_record(self) -> dict[str, list[Any]]:
        """{field: [rows holding NaN or inf, first such rows]} (featstore.store.values), from the
        record made at commit, or computed by streaming the file once when the manifest has
        none (a store written before the record existed)."""
        record = self.entry.get("nonfinite")
        if not isinstance(record, dict):
            try:
                record = nonfinite_record(self._file())
            except OSError as exc:
                raise self._broken(f"cannot read it ({exc})") from exc
            self.entry["nonfinite"] = record
        return record

    def _dataset(self, key: str) -> h5py.Dataset:
        """The open dataset at HDF5 path `key` (looked up once per open file: each h5py
        lookup walks the group, and sweeps ask for the same few datasets hundreds of times)."""
        fh = self._file()
        ds = self._datasets.get(key)
        if ds is None:
            ds = self._datasets[key] = fh[key]
        return ds

    @property
    def features(self) -> h5py.Dataset:
        """(N, D) float32 or float16 penultimate features."""
        return self._dataset("features")

    @property
    def logits(self) -> h5py.Dataset:
        """(N, C) float32 logits."""
        return self._dataset("logits")

    @property
    def labels(self) -> h5py.Dataset:
        """(N,) int64 class index, -1 where unknown (OOD rows)."""
        return self._dataset("labels")

    @property
    def ids(self) -> np.ndarray:
        """(N,) sample ids (relative paths or dataset indices) as Python strings."""
        ids: np.ndarray = self._file()["ids"].asstr()[()]
        return ids

    def extra_names(self) -> list[str]:
        """Names of the extra arrays stored with this split."""
        return extra_names(self._file())

    def has_extra(self, name: str) -> bool:
        """Whether extra `name` exists; a group name (e.g. `odin_logits`) counts when it holds
        at least one array. One HDF5 path lookup per open file (sweeps ask per setting), not a
        walk of every extra; a name that is not a plain relative path is matched against
        `extra_names`."""
        if any(part in ("", ".", "..") for part in name.split("/")):
            names = self.extra_names()
            return name in names or any(n.startswith(name + "/") for n in names)
        fh = self._file()
        key = f"extra/{name}"
        if key in self._datasets:
            return True
        obj = fh.get(key)
        if isinstance(obj, h5py.Dataset):
            self._datasets[key] = obj
            return True
        # a group: stop at its first array (h5py's visit ends when the callback returns a value)
        return isinstance(obj, h5py.Group) and bool(obj.visititems(
            lambda _name, member: True if isinstance(member, h5py.Dataset) else None))

    def extra(self, name: str) -> h5py.Dataset:
        """An extra array (DESIGN §2), e.g. `mc_logits`; error naming the available ones."""
        fh = self._file()
        key = f"extra/{name}"
        ds = self._datasets.get(key)   # open datasets are kept per open file (`_dataset`)
        if ds is None:
            obj = fh.get(key)
            if not isinstance(obj, h5py.Dataset):
                avail = ", ".join(self.extra_names()) or "none"
                raise UsageError(
                    f"split {self.name!r} has no extra {name!r} (available: {avail})"
                )
            ds = self._datasets[key] = obj
        return ds

    def extra_row_axis(self, name: str) -> int:
        """The axis of extra `name` that runs over the split's rows (its `row_axis`
        attribute, 0 when absent); read once per open file (a sweep reads an extra per
        setting, and an attribute read costs as much as a small array's)."""
        ds = self.extra(name)
        axis = self._row_axes.get(name)
        if axis is None:
            axis = self._row_axes[name] = int(ds.attrs.get(ROW_AXIS_ATTR, 0))
        return axis

    def iter_chunks(
        self, *fields: str, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> Iterator[tuple[slice, tuple[np.ndarray, ...]]]:
        """Yield (row slice, arrays) for the named fields in row chunks; floats as float32.

        Fields: `features`, `logits`, `labels` or `extra:<name>` (sliced along its row axis).
        Peak memory is one chunk of each field, whatever N is.
        """
        fields = fields or ("features",)
        for start in range(0, self.num_rows, chunk_rows):
            rows = slice(start, min(start + chunk_rows, self.num_rows))
            yield rows, tuple(self.read(f, rows) for f in fields)

    def dataset(self, field: str) -> h5py.Dataset:
        """The HDF5 dataset of a row field: `features`, `logits`, `labels` or `extra:<name>`
        (an extra whose rows are not its first axis is an error here; use `read`)."""
        if field in ("features", "logits", "labels"):
            return self._dataset(field)
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            ds = self.extra(name)
            if self.extra_row_axis(name) != 0:
                raise UsageError(f"extra {name!r} of split {self.name!r} is not row-major; "
                                 "read it with Split.read")
            return ds
        raise UsageError(
            f"unknown field {field!r}; expected features, logits, labels or extra:<name>"
        )

    def read_into(self, ds: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> None:
        """Read rows start..stop of a row-major dataset into `out` (same dtype, stop - start
        rows), without allocating; NaN / inf the split's record does not list are an error
        (`featstore.store.values.check_read_finite`)."""
        if stop > start:
            try:
                ds.read_direct(out, np.s_[start:stop], np.s_[0:stop - start])
            except OSError as exc:
                raise self._broken(f"cannot read rows {start}..{stop} of {ds.name!r} "
                                   f"({exc})") from exc
            check_read_finite(self, field_key(ds.name), out[:stop - start], start)

    def read(self, field: str, rows: slice | None = None) -> np.ndarray:
        """Read a field (optionally a row slice); floating arrays come back as float32. NaN /
        inf the split's record does not list are an error
        (`featstore.store.values.check_read_finite`)."""
        rows = rows if rows is not None else slice(None)
        axis = 0
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            ds = self.extra(name)
            axis = self.extra_row_axis(name)
            index = (slice(None),) * axis + (rows,)
            arr = self._read_ds(ds, index)
        elif field in ("features", "logits", "labels"):
            arr = self._read_ds(self._dataset(field), rows)
        else:
            raise UsageError(
                f"unknown field {field!r}; expected features, logits, labels or extra:<name>"
            )
        check_read_finite(self, field, arr, rows.indices(self.num_rows)[0], axis)
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        return arr

    def _read_ds(self, ds: h5py.Dataset, index: Any) -> np.ndarray:
        try:
            rows: np.ndarray = ds[index]
            return rows
        except OSError as exc:
            raise self._broken(f"cannot read {ds.name!r} ({exc})") from exc

    def close(self) -> None:
        if self._fh is not None and self._fh.id.valid:
            self._fh.close()
        self._fh = None
        self._datasets = {}
