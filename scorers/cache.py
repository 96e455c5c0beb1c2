"""Cached scores in STORE/scores.h5 (DESIGN §2): /<method>/<params-hash>/<split-slug>.

Each cached array carries the store's model sha256, the split file's sha256 and row count and
the params as JSON. An entry is used only when all of them match the split as the manifest
describes it now and the array is (num_rows,) float64: a re-extracted, damaged or changed
split never reads stale scores. The split file's sha256 is the one the manifest recorded at
commit (not re-hashed per call: hashing a large split on every `score` would cost more than
scoring it); a file changed behind the manifest's back is caught before the cache is read by
`Store.check_committed` (size always; sha256 when the file's stat changed since commit) and by
`featstore info --verify`. The params hash normalizes numbers (1 and 1.0 hash alike) so a
grid value and a default of different types share one entry.

scores.h5 is part of an untrusted store: a symbolic link at its name, or an HDF5 soft /
external link on an entry's path, is refused (never followed). A read-only store is scored
with the cache off (`cache_off_reason` says why; the commands print it).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from featstore.errors import FeatstoreWarning, InputError
from featstore.store.fileio import is_link, room_to_grow
from featstore.store.interfaces import SplitLike, StoreLike
from featstore.store.interrupts import raise_if_interrupted

SCORES_FILE = "scores.h5"
#: bytes an entry may add beyond its scores (HDF5 object headers, attributes, B-tree nodes)
CACHE_MARGIN = 64 * 1024


def _normalize(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    return repr(value)


def params_hash(params: Mapping[str, Any]) -> str:
    """Short digest of a parameter setting (numbers normalized to float)."""
    text = json.dumps(_normalize(dict(params)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_off_reason(store: StoreLike) -> str | None:
    """Why scores of `store` cannot be cached (a read-only store directory or scores.h5), or
    None when they can."""
    if store.manifest.get("in_memory"):
        return "an in-memory store (featstore.ArrayStore) has no score cache"
    path = Path(store.path)
    scores = path / SCORES_FILE
    if not os.access(path, os.W_OK | os.X_OK) or (
            os.path.lexists(scores) and not os.access(scores, os.W_OK)):
        return f"store {str(path)!r} is read-only: scoring with the score cache off"
    return None


class ScoreCache:
    """Read/write cached scores of one store."""

    def __init__(self, store: StoreLike):
        self.store = store
        self.path = Path(store.path) / SCORES_FILE
        if is_link(self.path):
            raise InputError(f"store {str(store.path)!r}: {SCORES_FILE} is a symbolic link; "
                             "featstore never follows links in a store: remove it, or pass "
                             "--no-cache")

    def _key(self, method: str, params: Mapping[str, Any], split: SplitLike) -> str:
        return f"{method}/{params_hash(params)}/{split.name.replace('/', '__')}"

    @staticmethod
    def _entry(fh: h5py.File, key: str) -> h5py.Dataset | None:
        """The dataset at `key` reached through hard links and groups only, else None."""
        node: Any = fh
        for part in key.split("/"):
            if not isinstance(node, h5py.Group):
                return None
            link = node.get(part, getlink=True)
            if not isinstance(link, h5py.HardLink):
                return None
            node = node[part]
        if not isinstance(node, h5py.Dataset) or node.external or node.is_virtual:
            return None
        return node

    def get(self, method: str, params: Mapping[str, Any], split: SplitLike) -> np.ndarray | None:
        """The cached scores, or None (a miss) when there are none, they do not match the
        split, hold NaN / inf, or scores.h5 cannot be read in any way (truncated by a failed
        write, an entry's path through a dataset, junk bytes): an unreadable cache is a miss
        and is rebuilt by the next `put`."""
        if not self.path.is_file():
            return None
        key = self._key(method, params, split)
        try:
            with h5py.File(self.path, "r") as fh:
                ds = self._entry(fh, key)
                if ds is None:
                    return None
                if (ds.attrs.get("model_sha256") != self.store.model_sha256
                        or ds.attrs.get("split_sha256") != split.entry["sha256"]
                        or int(ds.attrs.get("num_rows", -1)) != split.num_rows
                        or ds.shape != (split.num_rows,) or ds.dtype != np.float64):
                    return None
                scores = ds[()]
        except Exception:  # any failure of HDF5 on a damaged file: a miss
            raise_if_interrupted()
            return None
        return scores if np.isfinite(scores).all() else None

    def put(self, method: str, params: Mapping[str, Any], split: SplitLike,
            scores: np.ndarray) -> None:
        """Store `scores` under the key. A cache that cannot be written (no room under the
        free space or the file-size limit, a damaged scores.h5 that cannot be rebuilt, another
        process writing it) is a warning, never an error: the scores are already computed."""
        if is_link(self.path):
            raise InputError(f"store {str(self.store.path)!r}: {SCORES_FILE} is a symbolic "
                             "link; featstore never follows links in a store")
        data = np.asarray(scores, dtype=np.float64)
        size = os.path.getsize(self.path) if self.path.is_file() else 0
        room = room_to_grow(self.path.parent, size, data.nbytes + CACHE_MARGIN)
        if room is not None:
            warnings.warn(f"score cache {str(self.path)!r} not written: {room}",
                          FeatstoreWarning, stacklevel=2)
            return
        try:
            self._write(self._key(method, params, split), data, split, params)
        except Exception as exc:
            raise_if_interrupted()
            warnings.warn(f"score cache {str(self.path)!r} not written "
                          f"({type(exc).__name__}: {exc}); scores are not cached",
                          FeatstoreWarning, stacklevel=2)

    def _open_for_write(self) -> h5py.File:
        """scores.h5 opened for appending; a file HDF5 cannot open is replaced by a new one."""
        try:
            return h5py.File(self.path, "a")
        except OSError:
            self.path.unlink(missing_ok=True)
            return h5py.File(self.path, "x")

    def _write(self, key: str, data: np.ndarray, split: SplitLike,
               params: Mapping[str, Any]) -> None:
        with self._open_for_write() as fh:
            node: Any = fh
            for part in key.split("/")[:-1]:  # never create or delete through a soft/external
                link = node.get(part, getlink=True)  # link, nor inside a dataset
                if link is not None and (not isinstance(link, h5py.HardLink)
                                         or not isinstance(node[part], h5py.Group)):
                    del node[part]
                    link = None
                node = node.create_group(part) if link is None else node[part]
            last = key.rsplit("/", 1)[1]
            if node.get(last, getlink=True) is not None:
                del node[last]
            ds = node.create_dataset(last, data=data)
            ds.attrs["model_sha256"] = self.store.model_sha256
            ds.attrs["split_sha256"] = split.entry["sha256"]
            ds.attrs["num_rows"] = int(split.num_rows)
            ds.attrs["params"] = json.dumps(_normalize(dict(params)), sort_keys=True)
