"""Streaming, resumable writer of one split (DESIGN §2 invariants, §6).

A split's N source rows are cut into parts of `part_rows` consecutive rows: part k holds source
rows [k * part_rows, min((k + 1) * part_rows, N)) (fewer when `--skip-bad` drops unreadable
rows; possibly none). Each part is written to `splits/<slug>.parts/part-<k>.h5` (written as
`.tmp`, fsynced, renamed: a part file that exists is complete). `part_rows` is a multiple of
the batch size, so a part is a whole number of the batches an uninterrupted single-process run
makes, and its bytes do not depend on who computed it or when.

Whoever extracts a part — the single process of `featstore extract`, or one rank of a
`torchrun` extraction (featstore.extraction.distributed: each rank owns a contiguous block of parts)
— writes it under its global index. A killed extraction resumes by extracting exactly the
missing parts (`missing_parts`), so the set of part files, and hence the assembled split, is
the same as in an uninterrupted run whatever world size wrote or resumes it. `fingerprint`
(source, model, dtype, batch layout) and the number of source rows are stored with the parts;
parts written under another fingerprint, or under an unreadable fingerprint file, are
discarded. A part file that does not open as a part of this split (truncated, damaged: every
core dataset present, row-aligned, no more rows than its part) is deleted and redone. Every
file is created exclusively next to a checked real directory (featstore.store.fileio: no symbolic
link is followed), and before a part or the split file is written the free space (and
RLIMIT_FSIZE) is checked against its size, so a full disk is a clean error, not a crash inside
HDF5.

When every part exists, `finish` assembles the split file by streaming: each dataset is
created at its final shape with the same creation properties (chunking by rows, no
timestamps) as `layout.write_split_file`, the parts are copied into it one at a time (`ids`,
short strings, in one write: HDF5 numbers their heap objects per write call), and the
dataset is closed before the next is created. The file is byte-identical to
`write_split_file` of the concatenated arrays (tests/test_extract.py checks it) and the peak
memory is about one part of one dataset, whatever N is. The file is then committed to the
manifest (Store.commit_split) and the parts deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.fileio import (
    atomic_write_bytes,
    check_space,
    exclusive_tmp,
    fsync_dir,
    make_real_dir,
    read_regular,
    remove_stale,
    require_real_dir,
)
from featstore.store.layout import ROW_AXIS_ATTR, STRING_DTYPE, chunk_rows, dataset_paths
from featstore.store.store import SPLITS_DIR, Split, Store
from featstore.store.values import check_float16_range

FINGERPRINT = "fingerprint.json"
PART_META_ATTR = "featstore_meta"
_PART_NAME = re.compile(r"part-(\d{6})\.h5")
_CORE = ("features", "logits", "labels", "ids")


class SplitWriter:
    """Write the parts of one split (see the module docstring) and assemble them.

    `manage=True` (a single process, or rank 0 of a distributed run) owns the parts directory:
    it discards parts of another fingerprint, removes stale `.tmp` files and marks the split
    incomplete in the manifest. `manage=False` (the other ranks) only checks that the parts
    directory was prepared for the same fingerprint and writes its own parts.
    """

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
        num_rows: int,
        extra_row_axes: Mapping[str, int] | None = None,
        manage: bool = True,
        fs_wait_s: float = 0.0,
    ):
        self.store = store
        self.name = name
        self.part_rows = int(part_rows)
        self.num_rows = int(num_rows)
        self.num_parts = -(-self.num_rows // self.part_rows)
        self.dtype = dtype
        self.usage = usage
        self.source = dict(source)
        self.extra_row_axes = dict(extra_row_axes or {})
        self.parts_dir = store.split_file(name).with_suffix(".parts")
        self.part_meta: dict[str, Any] = {}
        self._buffer: list[dict[str, np.ndarray]] = []
        self._consumed = 0        # source rows of the current part seen so far
        self._part: int | None = None
        self.fs_wait_s = float(fs_wait_s)
        fp = {**dict(fingerprint), "num_rows": self.num_rows}
        if manage:
            self._prepare(fp)
            store.mark_incomplete(name, source, usage)
        else:
            self._check_prepared(fp)

    # ------------------------------------------------------------------ parts
    def part_path(self, index: int) -> Path:
        return self.parts_dir / f"part-{index:06d}.h5"

    def part_bounds(self, index: int) -> tuple[int, int]:
        """Source rows [start, stop) of part `index`."""
        start = index * self.part_rows
        return start, min(start + self.part_rows, self.num_rows)

    def done_parts(self) -> list[int]:
        """Indices of the complete part files present, sorted."""
        done = []
        for path in self.parts_dir.glob("part-*.h5"):
            match = _PART_NAME.fullmatch(path.name)
            if match is None or int(match.group(1)) >= self.num_parts:
                raise FeatstoreError(f"split {self.name!r}: {str(path)!r} is not one of the "
                                     f"{self.num_parts} parts of this split; remove it")
            done.append(int(match.group(1)))
        return sorted(done)

    def part_problem(self, index: int) -> str | None:
        """Why part file `index` cannot be used (cannot be opened, a core dataset missing,
        rows not aligned, more rows than the part covers), or None."""
        path = self.part_path(index)
        start, stop = self.part_bounds(index)
        try:
            if path.is_symlink() or not path.is_file():
                return "not a regular file"
            with h5py.File(path, "r") as fh:
                rows = set()
                for key in _CORE:
                    ds = fh.get(key)
                    if not isinstance(ds, h5py.Dataset):
                        return f"dataset {key!r} is missing"
                    rows.add(ds.shape[0] if ds.ndim else -1)
                if len(rows) != 1 or not 0 <= rows.pop() <= stop - start:
                    return "its datasets are not row-aligned within the part"
                json.loads(fh.attrs.get(PART_META_ATTR, "{}"))
        except Exception as exc:  # any failure to read it means: redo it
            return f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        return None

    def missing_parts(self, parts: range | None = None) -> list[int]:
        """The parts of `parts` (default: all) that have no complete file yet."""
        done = set(self.done_parts())
        return [k for k in (parts if parts is not None else range(self.num_parts))
                if k not in done]

    def _part_paths(self) -> list[Path]:
        return [self.part_path(k) for k in self.done_parts()]

    def _prepare(self, fingerprint: dict[str, Any]) -> None:
        """Keep the parts directory if it was made for this fingerprint, else start it afresh;
        delete temporaries, foreign entries and damaged parts (they are redone)."""
        fp_path = self.parts_dir / FINGERPRINT
        require_real_dir(self.store.path / SPLITS_DIR, "splits directory")
        if os.path.lexists(self.parts_dir):
            if not _same_fingerprint(fp_path, fingerprint) or self.parts_dir.is_symlink():
                remove_stale(self.parts_dir)
        if not os.path.lexists(self.parts_dir):
            make_real_dir(self.parts_dir, "parts directory")
            atomic_write_bytes(fp_path, json.dumps(fingerprint, sort_keys=True).encode())
        require_real_dir(self.parts_dir, "parts directory")
        for entry in self.parts_dir.iterdir():
            match = _PART_NAME.fullmatch(entry.name)
            keep = entry.name == FINGERPRINT or (
                match is not None and int(match.group(1)) < self.num_parts
                and self.part_problem(int(match.group(1))) is None)
            if not keep:
                remove_stale(entry)
        fsync_dir(self.parts_dir)

    def _check_prepared(self, fingerprint: dict[str, Any]) -> None:
        fp_path = self.parts_dir / FINGERPRINT

        def prepared() -> bool:
            return _same_fingerprint(fp_path, fingerprint)

        if not wait_for(prepared, self.fs_wait_s):
            raise FeatstoreError(
                f"split {self.name!r}: the parts directory {str(self.parts_dir)!r} was prepared "
                "for another source, model or batch layout than this process's; every rank must "
                "run the same command (same spec, model, --batch-size, --dtype)")

    def _write_part(self, arrays: dict[str, np.ndarray]) -> None:
        """Write `arrays` as part `self._part`: the HDF5 file is built in memory (h5py's core
        driver, no backing store), then its bytes go to an exclusive tmp file with plain
        writes, fsync, rename, fsync the dir. A full disk is then a clean OSError from
        os.write: HDF5 never holds a file whose write failed (which can crash the process
        when h5py later frees it)."""
        assert self._part is not None
        final = self.part_path(self._part)
        require_real_dir(self.parts_dir, "parts directory")
        need = sum(a.nbytes if a.dtype != object else a.size * 64 for a in arrays.values())
        check_space(self.parts_dir, need, f"split {self.name!r}: part {self._part}")
        with h5py.File(f"part-{self._part}-{id(self)}.h5", "w", driver="core",
                       backing_store=False) as fh:
            for key, arr in arrays.items():
                if key == "ids":
                    fh.create_dataset(key, data=arr.astype(object), dtype=STRING_DTYPE)
                else:
                    fh.create_dataset(key, data=arr)
            fh.attrs[PART_META_ATTR] = json.dumps(self.part_meta, sort_keys=True)
            fh.flush()
            image = fh.id.get_file_image()
        atomic_write_bytes(final, image)

    def _flush(self) -> None:
        """Write the buffered batches as the current part."""
        self._write_part(self._concat(self._buffer))
        self._buffer, self._consumed, self._part = [], 0, None

    def _axis(self, key: str) -> int:
        return self.extra_row_axes.get(key[len("extra/"):], 0) if key.startswith("extra/") else 0

    def _concat(self, batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {k: np.concatenate([b[k] for b in batches], axis=self._axis(k))
                for k in batches[0]}

    # ------------------------------------------------------------------ API
    def append(self, *, first_row: int, source_rows: int, features: np.ndarray,
               logits: np.ndarray, labels: np.ndarray, ids: np.ndarray,
               extras: Mapping[str, np.ndarray] | None = None) -> None:
        """Buffer one batch covering source rows [first_row, first_row + source_rows) (the
        arrays hold its kept rows); write the part once all its source rows have arrived.

        Batches of a part must arrive in order and never straddle two parts.
        """
        part = first_row // self.part_rows
        start, stop = self.part_bounds(part)
        if self._part is None:
            if first_row != start:
                raise FeatstoreError(f"split {self.name!r}: part {part} must start at row "
                                     f"{start}, got a batch at row {first_row}")
            self._part = part
        elif part != self._part or first_row != start + self._consumed:
            raise FeatstoreError(f"split {self.name!r}: batch at row {first_row} does not "
                                 f"continue part {self._part}")
        if first_row + source_rows > stop:
            raise FeatstoreError(f"split {self.name!r}: batch rows {first_row}.."
                                 f"{first_row + source_rows} straddle part {part}'s end {stop}")
        if self.dtype == "float16":
            check_float16_range(self.name, "features", features, first_row)
        batch = {"features": np.asarray(features, dtype=self.dtype),
                 "logits": np.asarray(logits, dtype=np.float32),
                 "labels": np.asarray(labels, dtype=np.int64),
                 "ids": np.asarray(ids).astype(str)}
        for key, arr in (extras or {}).items():
            batch[f"extra/{key}"] = np.asarray(arr)
        self._buffer.append(batch)
        self._consumed += int(source_rows)
        if start + self._consumed == stop:
            self._flush()

    def stored_part_meta(self) -> dict[str, Any]:
        """The `part_meta` recorded with the first part (the same in every part)."""
        paths = self._part_paths()
        if not paths:
            return {}
        with h5py.File(paths[0], "r") as fh:
            return json.loads(fh.attrs.get(PART_META_ATTR, "{}"))

    def written_ids(self) -> list[str]:
        """Ids of every row in the parts, in row order (for `--skip-bad`'s record)."""
        out: list[str] = []
        for part in self._part_paths():
            with h5py.File(part, "r") as fh:
                out.extend(fh["ids"].asstr()[()])
        return out

    def assemble(self) -> Path:
        """Stream every part into the split file `<slug>.h5.tmp` (see the module docstring)."""
        if self.num_parts == 0:
            raise FeatstoreError(f"split {self.name!r}: no rows were written (empty source?)")
        missing = self.missing_parts()
        if missing and wait_for(lambda: not self.missing_parts(), self.fs_wait_s):
            missing = []
        if missing:
            raise FeatstoreError(f"split {self.name!r}: {len(missing)} of {self.num_parts} "
                                 f"parts are missing (first: part {missing[0]}); rerun the "
                                 "extraction to resume")
        final = self.store.split_file(self.name)
        parts = [self.part_path(k) for k in range(self.num_parts)]
        check_space(final.parent, sum(p.stat().st_size for p in parts),
                    f"split {self.name!r}: the split file")
        tmp = exclusive_tmp(final)
        try:
            write_parts_file(tmp, parts, self.extra_row_axes)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        return tmp

    def commit(self, tmp: Path, extra_meta: Mapping[str, Any] | None = None) -> Split:
        """Commit an assembled file to the manifest, then delete the parts."""
        try:
            split = self.store.commit_split(self.name, tmp, usage=self.usage,
                                            source=self.source, extra_meta=extra_meta)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        remove_stale(self.parts_dir)
        return split

    def finish(self, extra_meta: Mapping[str, Any] | None = None) -> Split:
        """Write a pending part, assemble the split file, commit it, delete the parts."""
        if self._part is not None:
            self._flush()
        return self.commit(self.assemble(), extra_meta)


def _same_fingerprint(path: Path, fingerprint: Mapping[str, Any]) -> bool:
    """Whether the fingerprint file at `path` is readable JSON equal to `fingerprint` (a
    missing, damaged or linked file is not)."""
    try:
        return json.loads(read_regular(path, FINGERPRINT)) == fingerprint
    except (OSError, ValueError):
        return False


def wait_for(condition: Callable[[], bool], seconds: float, interval: float = 0.5) -> bool:
    """Whether `condition()` holds now or becomes true within `seconds` (polled). A shared
    filesystem (NFS) may show a file written on another node only after a delay; distributed
    extraction waits that long for the other ranks' files before calling them missing."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# ---------------------------------------------------------------------- streaming assembly
def _ordered_keys(keys: list[str]) -> list[str]:
    """write_split_file's creation order: features, logits, labels, ids, then sorted extras."""
    missing = [k for k in _CORE if k not in keys]
    if missing:
        raise FeatstoreError(f"part file lacks dataset(s) {', '.join(missing)}")
    return list(_CORE) + sorted(k for k in keys if k not in _CORE)


def write_parts_file(path: Path, parts: list[Path],
                     extra_row_axes: Mapping[str, int] | None = None) -> None:
    """Concatenate the row-aligned datasets of `parts` (in order) into a split file at `path`;
    `extra_row_axes` names the extras whose row axis is not 0 (as for write_split_file).

    Byte-identical to `layout.write_split_file` of the concatenated arrays: the same datasets,
    created in the same order with the same properties, each written front to back; here each
    is filled part by part and closed before the next is created, so the peak memory is one
    part of one dataset.
    """
    with h5py.File(parts[0], "r") as fh:
        keys = _ordered_keys(dataset_paths(fh))
        row_axes = dict(extra_row_axes or {})
        axes = {k: row_axes.get(k[len("extra/"):], 0) if k.startswith("extra/") else 0
                for k in keys}
        info = {k: (fh[k].shape, fh[k].dtype) for k in keys}
    shapes: dict[str, list[int]] = {k: list(shape) for k, (shape, _) in info.items()}
    for k in shapes:
        shapes[k][axes[k]] = 0
    for part in parts:
        with h5py.File(part, "r") as fh:
            if dataset_paths(fh) != sorted(keys):
                raise FeatstoreError(f"part {part} holds other datasets than {parts[0]}")
            for k in keys:
                shape = list(fh[k].shape)
                rows = shape[axes[k]]
                shape[axes[k]] = shapes[k][axes[k]]
                if shape != shapes[k] or fh[k].dtype != info[k][1]:
                    raise FeatstoreError(f"part {part}: dataset {k!r} has shape "
                                         f"{fh[k].shape} {fh[k].dtype}, unlike {parts[0]}")
                shapes[k][axes[k]] += rows
    with h5py.File(path, "x", track_order=False) as out:
        extra_group: h5py.Group | None = None
        for key in keys:
            if key.startswith("extra/"):
                if extra_group is None:
                    extra_group = out.create_group("extra", track_order=False)
                group, name = extra_group, key[len("extra/"):]
            else:
                group, name = out, key
            _copy_dataset(group, name, key, tuple(shapes[key]), info[key][1], axes[key], parts)


def _copy_dataset(group: h5py.Group, name: str, key: str, shape: tuple[int, ...],
                  dtype: np.dtype, axis: int, parts: list[Path]) -> None:
    """Create one dataset as layout._create / write_split_file would and fill it part by part."""
    kwargs: dict[str, Any] = {"track_times": False}
    if key == "ids":
        kwargs["dtype"] = STRING_DTYPE
    else:
        kwargs["dtype"] = dtype
        if len(shape) >= 2 and shape[axis] > 0:
            per_row = shape[:axis] + shape[axis + 1:]
            chunks = list(shape)
            chunks[axis] = chunk_rows(per_row, dtype.itemsize, shape[axis])
            kwargs["chunks"] = tuple(chunks)
    ds = group.create_dataset(name, shape=shape, **kwargs)
    if key == "ids":
        # One write: HDF5 numbers the strings' global-heap objects per write call, so only a
        # single call gives write_split_file's bytes. ids are short strings (a few MB per
        # 100k rows), not the N x D arrays whose copies the streaming avoids.
        ids = [np.asarray(_read(part, key), dtype=object) for part in parts]
        if shape[0]:
            ds[...] = np.concatenate(ids)
        del ds, ids
        return
    offset = 0
    for part in parts:
        data = _read(part, key)
        rows = data.shape[axis]
        if rows:
            ds[(slice(None),) * axis + (slice(offset, offset + rows),)] = data
        offset += rows
        del data
    if axis:
        ds.attrs[ROW_AXIS_ATTR] = axis
    del ds  # close it (flushing its chunk cache) before the next dataset is created


def _read(part: Path, key: str) -> np.ndarray:
    with h5py.File(part, "r") as fh:
        return fh[key].asstr()[()] if key == "ids" else fh[key][()]
