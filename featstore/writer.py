"""Streaming, resumable writer of one split (DESIGN §2 invariants).

Rows arrive in batches. Every `part_rows` rows are written to a part file
`splits/<slug>.parts/part-<k>.h5` (written as `.tmp`, fsynced, renamed: a part that exists is
complete). When the split ends, the parts are assembled into the final split file by the same
deterministic writer `Store.write_split` uses, which is then committed to the manifest.

A killed extraction resumes from the last complete part: the caller asks `resume_rows` and
skips that many rows (part_rows is a multiple of the batch size, so batches are the same as in
an uninterrupted run and the result is bit-for-bit identical). `fingerprint` (source, model,
dtype, batch layout) is stored with the parts; parts written under another fingerprint are
discarded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import FeatstoreError
from .fileio import fsync_dir
from .layout import STRING_DTYPE, dataset_paths, write_split_file
from .store import Split, Store

FINGERPRINT = "fingerprint.json"


class SplitWriter:
    """Append batches of (features, logits, labels, ids, extras) to a split, part by part."""

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        part_rows: int,
        dtype: str,
        usage: str,
        source: Mapping[str, Any],
        fingerprint: Mapping[str, Any],
        extra_row_axes: Mapping[str, int] | None = None,
    ):
        self.store = store
        self.name = name
        self.part_rows = int(part_rows)
        self.dtype = dtype
        self.usage = usage
        self.source = dict(source)
        self.extra_row_axes = dict(extra_row_axes or {})
        self.parts_dir = store.split_file(name).with_suffix(".parts")
        self._buffer: list[dict[str, np.ndarray]] = []
        self._buffered = 0
        self._prepare(dict(fingerprint))
        store.mark_incomplete(name, source, usage)

    # ------------------------------------------------------------------ parts
    def _part_paths(self) -> list[Path]:
        return sorted(self.parts_dir.glob("part-*.h5"))

    def _prepare(self, fingerprint: dict[str, Any]) -> None:
        fp_path = self.parts_dir / FINGERPRINT
        if self.parts_dir.is_dir():
            same = fp_path.is_file() and json.loads(fp_path.read_text()) == fingerprint
            if not same:
                shutil.rmtree(self.parts_dir)
        if not self.parts_dir.is_dir():
            self.parts_dir.mkdir(parents=True)
            fp_path.write_text(json.dumps(fingerprint, sort_keys=True))
        for stale in self.parts_dir.glob("*.tmp"):
            stale.unlink()
        self.resume_rows = 0
        for i, part in enumerate(self._part_paths()):
            if part.name != f"part-{i:06d}.h5":
                raise FeatstoreError(f"split {self.name!r}: unexpected part file {part}")
            with h5py.File(part, "r") as fh:
                self.resume_rows += int(fh["labels"].shape[0])

    def _write_part(self, arrays: dict[str, np.ndarray]) -> None:
        index = len(self._part_paths())
        final = self.parts_dir / f"part-{index:06d}.h5"
        tmp = final.with_suffix(".h5.tmp")
        with h5py.File(tmp, "w") as fh:
            for key, arr in arrays.items():
                if key == "ids":
                    fh.create_dataset(key, data=arr.astype(object), dtype=STRING_DTYPE)
                else:
                    fh.create_dataset(key, data=arr)
            fh.flush()
            os.fsync(fh.id.get_vfd_handle())
        os.replace(tmp, final)
        fsync_dir(self.parts_dir)

    def _flush(self, rows: int) -> None:
        """Write the first `rows` buffered rows as one part."""
        merged = self._concat(self._buffer)
        head = {k: _take(v, slice(0, rows), self._axis(k)) for k, v in merged.items()}
        tail = {k: _take(v, slice(rows, None), self._axis(k)) for k, v in merged.items()}
        self._write_part(head)
        self._buffered -= rows
        self._buffer = [tail] if self._buffered else []

    def _axis(self, key: str) -> int:
        return self.extra_row_axes.get(key[len("extra/"):], 0) if key.startswith("extra/") else 0

    def _concat(self, batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {k: np.concatenate([b[k] for b in batches], axis=self._axis(k))
                for k in batches[0]}

    # ------------------------------------------------------------------ API
    def append(self, *, features: np.ndarray, logits: np.ndarray, labels: np.ndarray,
               ids: np.ndarray, extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Buffer one batch; write a part whenever `part_rows` rows are buffered."""
        batch = {"features": np.asarray(features, dtype=self.dtype),
                 "logits": np.asarray(logits, dtype=np.float32),
                 "labels": np.asarray(labels, dtype=np.int64),
                 "ids": np.asarray(ids).astype(str)}
        for key, arr in (extras or {}).items():
            batch[f"extra/{key}"] = np.asarray(arr)
        self._buffer.append(batch)
        self._buffered += len(batch["labels"])
        while self._buffered >= self.part_rows:
            self._flush(self.part_rows)

    def finish(self, extra_meta: Mapping[str, Any] | None = None) -> Split:
        """Write the last part, assemble the split file, commit it, delete the parts."""
        if self._buffered:
            self._flush(self._buffered)
        parts = self._part_paths()
        if not parts:
            raise FeatstoreError(f"split {self.name!r}: no rows were written (empty source?)")
        arrays: dict[str, list[np.ndarray]] = {}
        for part in parts:
            with h5py.File(part, "r") as fh:
                for key in dataset_paths(fh):
                    data = fh[key].asstr()[()] if key == "ids" else fh[key][()]
                    arrays.setdefault(key, []).append(data)
        merged = {k: np.concatenate(v, axis=self._axis(k)) for k, v in arrays.items()}
        extras = {k[len("extra/"):]: v for k, v in merged.items() if k.startswith("extra/")}
        tmp = self.store.split_file(self.name).with_suffix(".h5.tmp")
        try:
            write_split_file(tmp, features=merged["features"], logits=merged["logits"],
                             labels=merged["labels"], ids=merged["ids"], extras=extras,
                             extra_row_axes=self.extra_row_axes)
            split = self.store.commit_split(self.name, tmp, usage=self.usage, source=self.source,
                                            extra_meta=extra_meta)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        shutil.rmtree(self.parts_dir)
        return split


def _take(arr: np.ndarray, rows: slice, axis: int) -> np.ndarray:
    index = (slice(None),) * axis + (rows,)
    return arr[index]
