"""Cached scores in STORE/scores.h5 (DESIGN §2): /<method>/<params-hash>/<split-slug>.

Each cached array carries the store's model sha256, the split file's sha256 and the params as
JSON; a cached entry whose digests no longer match (the split was re-extracted, the store was
rebuilt for another model) is ignored and rewritten. The params hash normalizes numbers
(1 and 1.0 hash alike) so a grid value and a default of different types share one entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

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


class ScoreCache:
    """Read/write cached scores of one store."""

    def __init__(self, store: Any):
        self.store = store
        self.path = Path(store.path) / SCORES_FILE

    def _key(self, method: str, params: Mapping[str, Any], split: Any) -> str:
        return f"{method}/{params_hash(params)}/{split.name.replace('/', '__')}"

    def get(self, method: str, params: Mapping[str, Any], split: Any) -> np.ndarray | None:
        if not self.path.is_file():
            return None
        key = self._key(method, params, split)
        try:
            with h5py.File(self.path, "r") as fh:
                if key not in fh:
                    return None
                ds = fh[key]
                if (ds.attrs.get("model_sha256") != self.store.model_sha256
                        or ds.attrs.get("split_sha256") != split.entry["sha256"]):
                    return None
                return ds[()]
        except OSError:
            return None  # an unreadable cache is a miss; it is rebuilt on the next put

    def put(self, method: str, params: Mapping[str, Any], split: Any, scores: np.ndarray) -> None:
        key = self._key(method, params, split)
        try:
            fh = h5py.File(self.path, "a")
        except OSError:
            self.path.unlink(missing_ok=True)
            fh = h5py.File(self.path, "a")
        with fh:
            if key in fh:
                del fh[key]
            ds = fh.create_dataset(key, data=np.asarray(scores, dtype=np.float64))
            ds.attrs["model_sha256"] = self.store.model_sha256
            ds.attrs["split_sha256"] = split.entry["sha256"]
            ds.attrs["params"] = json.dumps(_normalize(dict(params)), sort_keys=True)
