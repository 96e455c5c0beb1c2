"""HDF5 layout of one split file (DESIGN §2) and the deterministic writer of one.

A split file holds row-aligned datasets `features` (N, D) float32|float16, `logits` (N, C)
float32, `labels` (N,) int64, `ids` (N,) utf-8 and optional `extra/<name>` arrays. Features and
logits are chunked by rows; chunk size and compression were chosen by measurement
(benchmarks/bench_store_layout.py, recorded in benchmarks/results/store-layout.md): row
chunks of about `CHUNK_BYTES` and no compression. Datasets are written without timestamps, so
the same arrays always give the same bytes (and the same sha256).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np

FEATURE_DTYPES = ("float32", "float16")
CHUNK_BYTES = 1 << 20
STRING_DTYPE = h5py.string_dtype("utf-8")
ROW_AXIS_ATTR = "row_axis"


def chunk_rows(row_shape: tuple[int, ...], itemsize: int, num_rows: int) -> int:
    """Rows per chunk so that one chunk holds about CHUNK_BYTES (at least 1, at most N)."""
    row_bytes = max(1, int(np.prod(row_shape, dtype=np.int64)) * itemsize)
    return int(max(1, min(num_rows, CHUNK_BYTES // row_bytes)))


def _create(group: h5py.Group, name: str, data: np.ndarray, row_axis: int = 0) -> h5py.Dataset:
    """Create one dataset, chunked along its row axis when it has rows, without timestamps."""
    kwargs: dict = {"track_times": False}
    if data.ndim >= 2 and data.shape[row_axis] > 0:
        shape = list(data.shape)
        per_row = shape[:row_axis] + shape[row_axis + 1 :]
        shape[row_axis] = chunk_rows(tuple(per_row), data.dtype.itemsize, data.shape[row_axis])
        kwargs["chunks"] = tuple(shape)
    ds = group.create_dataset(name, data=data, **kwargs)
    if row_axis:
        ds.attrs[ROW_AXIS_ATTR] = row_axis
    return ds


def write_split_file(
    path: Path,
    *,
    features: np.ndarray,
    logits: np.ndarray,
    labels: np.ndarray,
    ids: np.ndarray,
    extras: Mapping[str, np.ndarray] | None = None,
    extra_row_axes: Mapping[str, int] | None = None,
) -> None:
    """Write a complete split file at `path` (the caller renames it into place)."""
    extras = extras or {}
    extra_row_axes = extra_row_axes or {}
    with h5py.File(path, "x", track_order=False) as fh:
        _create(fh, "features", features)
        _create(fh, "logits", logits)
        _create(fh, "labels", labels)
        fh.create_dataset("ids", data=np.asarray(ids, dtype=object), dtype=STRING_DTYPE,
                          track_times=False)
        if extras:
            grp = fh.create_group("extra", track_order=False)
            for name in sorted(extras):
                _create(grp, name, extras[name], extra_row_axes.get(name, 0))


def dataset_paths(group: h5py.Group) -> list[str]:
    """Paths of every dataset below `group`, sorted."""
    names: list[str] = []

    def visit(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            names.append(name)

    group.visititems(visit)
    return sorted(names)


def extra_names(fh: h5py.File) -> list[str]:
    """Names of all datasets under /extra (nested names joined by '/')."""
    return dataset_paths(fh["extra"]) if "extra" in fh else []
