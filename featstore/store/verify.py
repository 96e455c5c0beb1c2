"""Verification of a store's files (DESIGN §2, §9): what `featstore info --verify` checks and
what every read checks first.

- `hdf5_link_problem`, `split_file_problem`: an open HDF5 file against the rules (no soft or
  external links, no external/virtual storage; the split's datasets, shapes, widths and labels
  against its manifest entry and the head).
- `check_committed(store, name)`: the split's file is the regular file committed for it: inside
  the store, not a link, the recorded size, and (when its stat differs from the one recorded at
  commit in `.featstore.stat`) the recorded sha256; hashed at most once per (path, size,
  mtime, inode) in this process (`_verified`).
- `split_problems(path, manifest)`: every complete split's file hashed and inspected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np

from featstore.errors import FeatstoreError, InputError
from featstore.store.fileio import (
    LinkError,
    atomic_write_json,
    read_regular,
    require_real_dir,
    require_regular_file,
    sha256_file,
)
from featstore.store.layout import ROW_AXIS_ATTR, extra_names
from featstore.store.lock import StoreLock
from featstore.store.manifest import SPLITS_DIR, STAT_FILE

_verified: dict[tuple[str, int, int, int], str] = {}  # (path, size, mtime_ns, ino) -> sha256


class StoreFiles(Protocol):
    """What `check_committed` reads of a store: its directory and manifest."""

    path: Path
    manifest: dict[str, Any]


def hdf5_link_problem(fh: h5py.File, opened: dict[str, Any] | None = None) -> str | None:
    """Why an HDF5 file of a store may not be read, or None: any soft or external link, or a
    dataset whose data lives outside the file (external storage, a virtual dataset). The
    objects it opens behind hard links are put in `opened` (name -> object) when given, so a
    caller checking them further does not look them up again (each h5py lookup walks the
    group and reads the object header)."""
    found: list[str] = []

    def visit(name: str, link: Any) -> None:
        if found:
            return
        if isinstance(link, h5py.SoftLink):
            found.append(f"{name!r} is an HDF5 soft link to {link.path!r}")
        elif isinstance(link, h5py.ExternalLink):
            found.append(f"{name!r} is an HDF5 external link to {link.filename!r}")
        elif not isinstance(link, h5py.HardLink):
            found.append(f"{name!r} is an HDF5 link of type {type(link).__name__}")
        else:
            obj = fh.get(name)
            if opened is not None:
                opened[name] = obj
            if isinstance(obj, h5py.Dataset) and (obj.external or obj.is_virtual):
                found.append(f"dataset {name!r} keeps its data outside the file")

    fh.visititems_links(visit)
    if found:
        return found[0] + "; featstore never follows links out of a store file"
    return None


def split_file_problem(fh: h5py.File, entry: Mapping[str, Any],
                       manifest: Mapping[str, Any]) -> str | None:
    """What is wrong with an open split file against its manifest entry, or None: links
    (hdf5_link_problem), a missing dataset, a dataset of the wrong rank, kind or shape, row
    counts that differ, widths that differ from the manifest or the head, labels outside
    [-1, C-1]."""
    opened: dict[str, Any] = {}  # what the link check opened: looked up once
    link = hdf5_link_problem(fh, opened)
    if link:
        return link

    def get(key: str) -> Any:
        return opened[key] if key in opened else fh.get(key)

    n = int(entry["num_rows"])
    dims = entry["dims"]
    num_classes = int(manifest["num_classes"])
    want = {"features": (2, "f", "floats"), "logits": (2, "f", "floats"),
            "labels": (1, "iu", "integers"), "ids": (1, "OSU", "strings")}
    for key, (ndim, kinds, noun) in want.items():
        ds = get(key)
        if not isinstance(ds, h5py.Dataset):
            return f"dataset {key!r} is missing"
        kind = "O" if h5py.check_string_dtype(ds.dtype) is not None else ds.dtype.kind
        if ds.ndim != ndim or kind not in kinds or h5py.check_vlen_dtype(ds.dtype) and \
                key != "ids":
            return f"dataset {key!r} is {ds.ndim}-D {ds.dtype}, expected {ndim}-D {noun}"
        if ds.shape[0] != n:
            return f"dataset {key!r} has {ds.shape[0]} rows, the manifest says {n}"
    for key in ("features", "logits"):  # both are datasets (checked above)
        width = get(key).shape[1]
        if width != int(dims.get(key, -1)):
            return f"dataset {key!r} has width {width}, the manifest says {dims.get(key)}"
    if int(dims["features"]) != int(manifest["feature_dim"]) or \
            int(dims["logits"]) != num_classes:
        return (f"features x logits are {dims['features']} x {dims['logits']} wide, the head is "
                f"{num_classes} x {manifest['feature_dim']}")
    if n:
        labels = get("labels")[()]
        bad = np.flatnonzero((labels < -1) | (labels >= num_classes))
        if bad.size:
            return (f"{bad.size} label(s) outside -1..{num_classes - 1} (first: row "
                    f"{int(bad[0])}, label {int(labels[bad[0]])})")
    for name in extra_names(fh):
        ds = fh["extra"][name]
        axis = int(ds.attrs.get(ROW_AXIS_ATTR, 0))
        if ds.ndim <= axis or ds.shape[axis] != n:
            return f"extra {name!r} has shape {ds.shape}, no row axis of length {n}"
    return None


def split_problems(path: Path, manifest: Mapping[str, Any]) -> list[str]:
    """One message per problem of every complete split's file: a regular file inside the
    store, its sha256 against the manifest, its HDF5 structure and links
    (`split_file_problem`)."""
    problems = []
    for name, entry in manifest["splits"].items():
        if not entry.get("complete"):
            continue
        fpath = path / entry["file"]
        try:
            require_real_dir(path / SPLITS_DIR, "splits directory")
            require_regular_file(fpath, f"split {name!r} file")
        except FileNotFoundError:
            problems.append(f"split {name!r}: file {entry['file']} is missing")
            continue
        except LinkError as exc:
            problems.append(f"split {name!r}: {exc.strerror}")
            continue
        digest = sha256_file(fpath)
        if digest != entry["sha256"]:
            problems.append(
                f"split {name!r}: sha256 {digest[:12]}… does not match manifest "
                f"{entry['sha256'][:12]}…"
            )
            continue
        try:
            with h5py.File(fpath, "r") as fh:
                problem = split_file_problem(fh, entry, manifest)
        except Exception as exc:
            problem = f"unreadable ({exc})"
        if problem:
            problems.append(f"split {name!r}: {problem}")
    return problems


def check_committed(store: StoreFiles, name: str) -> None:
    """InputError unless split `name`'s file is the regular file committed for it: inside
    the store, not a link, the size the manifest records, and (when its stat differs from
    the one recorded at commit) the sha256 the manifest records."""
    entry = store.manifest["splits"][name]
    where = f"store {str(store.path)!r}: split {name!r}"
    fpath = store.path / entry["file"]
    try:
        require_real_dir(store.path / SPLITS_DIR, "splits directory")
        st = require_regular_file(fpath, "split file")
    except FileNotFoundError:
        raise InputError(f"{where}: file {entry['file']} is missing; re-extract the split "
                         "(rerun `featstore extract`)") from None
    except LinkError as exc:
        raise InputError(f"{where}: {exc.strerror}") from None
    size = entry.get("size_bytes")
    if isinstance(size, int) and st.st_size != size:
        raise InputError(f"{where}: file {entry['file']} has {st.st_size} bytes, the "
                         f"manifest says {size} (truncated or replaced); re-extract the "
                         "split (rerun `featstore extract`)")
    key = (str(fpath), st.st_size, st.st_mtime_ns, st.st_ino)
    if _verified.get(key) == entry["sha256"]:
        return
    stats = stat_record(store.path)
    rel = entry["file"]
    if stats.get(rel) == [st.st_size, st.st_mtime_ns, st.st_ino, entry["sha256"]]:
        _verified[key] = entry["sha256"]
        return
    digest = sha256_file(fpath)
    if digest != entry["sha256"]:
        raise InputError(f"{where}: file {entry['file']} changed since it was committed "
                         f"(sha256 {digest[:12]}…, manifest {entry['sha256'][:12]}…); "
                         "re-extract the split (rerun `featstore extract`)")
    _verified[key] = digest
    record_stat(store.path, rel, fpath, digest)


def stat_record(path: Path) -> dict[str, Any]:
    """The store's `.featstore.stat` record ({} when absent or unreadable)."""
    try:
        data = json.loads(read_regular(path / STAT_FILE, STAT_FILE))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_stat(path: Path, rel: str, fpath: Path, digest: str) -> None:
    """Remember (size, mtime, inode, sha256) of a file just hashed in `.featstore.stat`
    so that later opens need not hash it; best effort (a read-only store keeps hashing)."""
    if not os.access(path, os.W_OK):
        return
    try:
        with StoreLock(path):
            record = stat_record(path)
            st = os.lstat(fpath)
            record[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
            atomic_write_json(path / STAT_FILE, record)
    except (OSError, FeatstoreError):
        pass
