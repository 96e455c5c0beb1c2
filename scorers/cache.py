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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from featstore.errors import InputError
from featstore.fileio import is_link
from featstore.interfaces import SplitLike, StoreLike

SCORES_FILE = "scores.h5"


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
        """The dataset at `key` reached through hard links only, else None."""
        node: Any = fh
        for part in key.split("/"):
            link = node.get(part, getlink=True)
            if not isinstance(link, h5py.HardLink):
                return None
            node = node[part]
        if not isinstance(node, h5py.Dataset) or node.external or node.is_virtual:
            return None
        return node

    def get(self, method: str, params: Mapping[str, Any], split: SplitLike) -> np.ndarray | None:
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
                return ds[()]
        except (OSError, ValueError, TypeError):
            return None  # an unreadable cache is a miss; it is rebuilt on the next put

    def put(self, method: str, params: Mapping[str, Any], split: SplitLike,
            scores: np.ndarray) -> None:
        key = self._key(method, params, split)
        if is_link(self.path):
            raise InputError(f"store {str(self.store.path)!r}: {SCORES_FILE} is a symbolic "
                             "link; featstore never follows links in a store")
        try:
            fh = h5py.File(self.path, "a")
        except OSError:
            self.path.unlink(missing_ok=True)
            fh = h5py.File(self.path, "x")
        with fh:
            node: Any = fh
            for part in key.split("/"):  # never create or delete through a soft/external link
                link = node.get(part, getlink=True)
                if link is not None and not isinstance(link, h5py.HardLink):
                    del node[part]
                    break
                if link is None:
                    break
                node = node[part]
            if fh.get(key, getlink=True) is not None:
                del fh[key]
            ds = fh.create_dataset(key, data=np.asarray(scores, dtype=np.float64))
            ds.attrs["model_sha256"] = self.store.model_sha256
            ds.attrs["split_sha256"] = split.entry["sha256"]
            ds.attrs["num_rows"] = int(split.num_rows)
            ds.attrs["params"] = json.dumps(_normalize(dict(params)), sort_keys=True)
