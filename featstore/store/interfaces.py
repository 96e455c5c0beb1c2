"""The typed interface of a store and a split as the layers above the store core use them
(scorers, metrics, sweeps, Gscore): `StoreLike` and `SplitLike`, structural Protocols that
`featstore.store.store.Store` and `featstore.store.reader.Split` satisfy (a test checks both with a
type checker's view of their members: tests/test_interfaces.py).

A scorer never needs more than this: the head (W, b), the complete splits by name, role and
usage, and per split its sizes and its row fields read whole (`features`, `logits`, `labels`
as lazy HDF5 datasets), in row slices (`read`, `read_into`) or in chunks (`iter_chunks`).
Writing, locking and the manifest's internals stay behind `Store`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import h5py
import numpy as np


@runtime_checkable
class SplitLike(Protocol):
    """One complete split of a store: row-aligned features (N, D), logits (N, C), labels (N,)
    and optional `extra/<name>` arrays."""

    name: str
    role: str
    group: str | None
    usage: str
    num_rows: int
    dims: dict[str, int]
    dtype: str
    entry: dict[str, Any]

    @property
    def path(self) -> Path: ...

    @property
    def model_sha256(self) -> str: ...

    @property
    def features(self) -> h5py.Dataset: ...

    @property
    def logits(self) -> h5py.Dataset: ...

    @property
    def labels(self) -> h5py.Dataset: ...

    @property
    def ids(self) -> np.ndarray: ...

    def extra_names(self) -> list[str]: ...

    def has_extra(self, name: str) -> bool: ...

    def extra(self, name: str) -> h5py.Dataset: ...

    def extra_row_axis(self, name: str) -> int: ...

    def iter_chunks(self, *fields: str, chunk_rows: int = ...
                    ) -> Iterator[tuple[slice, tuple[np.ndarray, ...]]]: ...

    def dataset(self, field: str) -> h5py.Dataset: ...

    def read(self, field: str, rows: slice | None = None) -> np.ndarray: ...

    def read_into(self, ds: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> None: ...


@runtime_checkable
class StoreLike(Protocol):
    """A store opened for reading: one model's head and its complete splits."""

    path: Path
    manifest: dict[str, Any]

    @property
    def model_sha256(self) -> str: ...

    @property
    def head(self) -> tuple[np.ndarray, np.ndarray]: ...

    def splits(self, role: str | None = None, usage: str | None = None) -> list[str]: ...

    def has_split(self, name: str) -> bool: ...

    def split(self, name: str) -> SplitLike: ...

    def check_committed(self, name: str) -> None: ...
