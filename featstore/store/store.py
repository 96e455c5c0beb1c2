"""The store (DESIGN §2-§3): a directory of HDF5 split files indexed by a JSON manifest.

    STORE/store.json        manifest, written atomically (tmp, fsync, rename)
    STORE/model.h5          /head/weight (C, D) f32, /head/bias (C,) f32, /classes (C,) utf-8
    STORE/splits/<slug>.h5  one file per split
    STORE/scores.h5         cached scores (scorers.cache)

A split is visible to readers only when the manifest lists it with `complete: true`; its file
is renamed into place before the manifest says so, so a reader never sees a half-written split.

Trust (DESIGN §9): a store is untrusted input. Writers hold the store lock (featstore.store.lock),
merge their change into the manifest as it is on disk (another writer's committed splits are
never dropped) and never follow symbolic links (featstore.store.fileio). Readers validate the
manifest's fields, accept a split file only at `splits/<slug>.h5` inside the store, refuse
links (symbolic, HDF5 soft and external, external or virtual dataset storage), check a file's
shapes against the manifest and the head, and check that the file is the one committed: its
size and, when its stat (size, mtime, inode) differs from the one recorded at commit in
`.featstore.stat`, its sha256 (hashed once, then recorded). `verify` hashes every file.

This module holds `Store` (open, create, read the head and the splits, write and commit
splits); the split reader is `featstore.store.reader.Split`, the manifest rules and the store's own
files are `featstore.store.manifest`, and the file checks are `featstore.store.verify`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from numpy.typing import ArrayLike

from featstore.errors import FeatstoreError, InputError, NoHeadError, UsageError
from featstore.store.fileio import (
    LinkError,
    atomic_write_json,
    check_space,
    exclusive_tmp,
    fsync_dir,
    fsync_file,
    make_real_dir,
    require_real_dir,
    require_regular_file,
    sha256_arrays,
    sha256_file,
)
from featstore.store.layout import STRING_DTYPE, extra_names, write_split_file
from featstore.store.lock import LOCK_FILE, StoreLock
from featstore.store.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    MODEL_FILE,
    OWN_FILES,
    SPLITS_DIR,
    STAT_FILE,
    USAGES,
    default_usage,
    is_own_layout,
    read_manifest,
    remove_own_files,
    validate_manifest,
)
from featstore.store.names import parse_split_name
from featstore.store.reader import DEFAULT_CHUNK_ROWS, Split
from featstore.store.splitarrays import prepare_head, prepare_split
from featstore.store.values import nonfinite_record
from featstore.store.verify import (
    _verified,
    check_committed,
    hdf5_link_problem,
    split_file_problem,
    split_problems,
    stat_record,
)
from featstore.version import __version__

# The store's public names, wherever they live: `featstore.store.store` stays the one import point
# (reader: featstore.store.reader; manifest and own files: featstore.store.manifest; checks:
# featstore.store.verify).
__all__ = ["DEFAULT_CHUNK_ROWS", "FORMAT_VERSION", "LOCK_FILE", "MANIFEST", "MODEL_FILE",
           "OWN_FILES", "SPLITS_DIR", "STAT_FILE", "USAGES", "Split", "Store", "_verified",
           "default_usage", "hdf5_link_problem", "is_own_layout", "remove_own_files",
           "split_file_problem", "write_split_file"]

logger = logging.getLogger(__name__)


class Store:
    """A feature store directory. Open read-only with `Store.open(path)` (DESIGN §3)."""

    def __init__(self, path: Path, manifest: dict[str, Any], writable: bool):
        self.path = Path(path)
        self.manifest = manifest
        self.writable = writable
        self._splits: dict[str, Split] = {}
        self._head: tuple[np.ndarray, np.ndarray] | None = None

    # ----------------------------------------------------------------- construction
    @classmethod
    def open(cls, path: str | os.PathLike[str], mode: str = "r") -> Store:
        """Open an existing store; `mode='a'` allows adding splits."""
        if mode not in ("r", "a"):
            raise UsageError(f"Store.open: mode {mode!r} is not 'r' or 'a'")
        path = Path(path)
        mpath = path / MANIFEST
        if not os.path.lexists(mpath):
            what = "does not exist" if not path.exists() else f"has no {MANIFEST}"
            raise InputError(f"store {str(path)!r} {what}", need="store",
                             how="create one with `featstore.extraction.extract.extract` or "
                                 "`featstore.extraction.importer.import_arrays`")
        manifest = validate_manifest(path, read_manifest(path))
        try:
            require_regular_file(path / MODEL_FILE, MODEL_FILE)
        except FileNotFoundError:
            raise InputError(f"store {str(path)!r}: {MODEL_FILE} is missing; rebuild the store"
                             ) from None
        except LinkError as exc:
            raise InputError(f"store {str(path)!r}: {exc.strerror}") from None
        logger.debug("opened store %s (mode %r, %d splits)", path, mode,
                     len(manifest.get("splits", {})))
        return cls(path, manifest, writable=(mode == "a"))

    def writing(self) -> StoreLock:
        """The store's write lock (featstore.store.lock), as a context manager."""
        return StoreLock(self.path)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        head: tuple[np.ndarray, np.ndarray] | None,
        classes: list[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        dims: tuple[int, int] | None = None,
    ) -> Store:
        """Create an empty store for one model: writes model.h5 and the manifest.

        `provenance` is the model's record (name, architecture, sha256 of the weights, input
        transform, torch versions); without a `sha256` the digest of the head is used.
        `head=None` makes a store without a classifier head (a non-linear head, features from
        elsewhere): `dims` = (C, D) then gives its logit and feature widths, model.h5 holds the
        class names only and the manifest says `"has_head": false`.
        An existing store is refused unless `overwrite`, which deletes it first.
        """
        path = Path(path)
        weight, bias = _head_arrays(head, dims)
        num_classes = weight.shape[0]
        classes = [str(c) for c in classes] if classes is not None else [
            str(i) for i in range(num_classes)
        ]
        if len(classes) != num_classes:
            raise UsageError(f"classes: {len(classes)} names for a head with {num_classes} classes")
        if os.path.lexists(path) and not path.is_dir():
            raise UsageError("exists and is not a directory", param="path", value=path)
        make_real_dir(path, "store directory") if not path.is_dir() else None
        with StoreLock(path):
            has_store = os.path.lexists(path / MANIFEST)
            if has_store and not overwrite:
                raise UsageError(f"store {str(path)!r} already exists",
                                 change={"overwrite": True}, effect="to replace it")
            if not is_own_layout(path):
                if has_store:  # a store with the user's files beside it: only ours go
                    remove_own_files(path)
                else:
                    names = sorted(c.name for c in path.iterdir())
                    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                    raise UsageError(
                        f"exists and is not a featstore store (it holds {shown}), which is "
                        "never replaced: choose an empty or new path, or remove the directory "
                        "yourself", param="path", value=path)
            else:  # a store, or an unfinished creation (killed before store.json)
                remove_own_files(path)
            make_real_dir(path / SPLITS_DIR, "splits directory")
            tmp = exclusive_tmp(path / MODEL_FILE)
            with h5py.File(tmp, "x") as fh:
                if head is not None:
                    fh.create_dataset("head/weight", data=weight, track_times=False)
                    fh.create_dataset("head/bias", data=bias, track_times=False)
                fh.create_dataset("classes", data=np.asarray(classes, dtype=object),
                                  dtype=STRING_DTYPE, track_times=False)
            fsync_file(tmp)
            model_file_sha = sha256_file(tmp)
            os.replace(tmp, path / MODEL_FILE)
            fsync_dir(path)
            model = dict(provenance or {})
            if head is None and "sha256" not in model:
                raise UsageError("a store without a head needs provenance with a 'sha256'")
            model.setdefault("sha256", sha256_arrays({"weight": weight, "bias": bias}))
            manifest: dict[str, Any] = {
                "format_version": FORMAT_VERSION,
                "featstore_version": __version__,
                "model": model,
                "model_file": {"file": MODEL_FILE, "sha256": model_file_sha},
                "num_classes": num_classes,
                "feature_dim": int(weight.shape[1]),
                "splits": {},
            }
            if head is None:
                manifest["has_head"] = False
            atomic_write_json(path / MANIFEST, manifest)
        return cls(path, manifest, writable=True)

    @classmethod
    def from_arrays(
        cls,
        path: str | os.PathLike[str],
        *,
        head: tuple[np.ndarray, np.ndarray] | None,
        splits: Mapping[str, Mapping[str, Any]],
        classes: list[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        dtype: str = "float32",
        overwrite: bool = False,
    ) -> Store:
        """Build a store from arrays extracted anywhere (bring-your-own features).

        `splits` maps split names to dicts with `features`, `logits` (optional: computed as
        features @ W.T + b when absent), `labels` (optional: -1), `ids` (optional: row index),
        `extras` (optional dict) and `usage`/`source` (optional). With `overwrite`, an
        existing store is replaced only after the whole new one was written and validated
        (`_replace_store`): bad arrays leave the old store as it was.
        `head=None`: a store without a classifier head; every split then gives its logits,
        and without a provenance `sha256` the digest of every split's features and logits
        identifies the model.
        """
        path = Path(path)
        if overwrite and os.path.lexists(path / MANIFEST):
            return _replace_store(cls, path, dict(head=head, splits=splits, classes=classes,
                                                 provenance=provenance, dtype=dtype))
        existed = os.path.lexists(path)
        dims, provenance = None, dict(provenance or {})
        if head is None:
            dims, digest = _headless_dims(splits)
            provenance.setdefault("sha256", digest)
            provenance.setdefault("sha256_of", "features and logits")
        store = cls.create(path, head=head, classes=classes, provenance=provenance,
                           overwrite=overwrite, dims=dims)
        try:
            with store.writing():
                for name, arrays in splits.items():
                    store.write_split(name, dtype=dtype, **arrays)
        except BaseException:
            with contextlib.suppress(OSError):
                remove_own_files(path)
                (path / LOCK_FILE).unlink()
                if not existed:
                    path.rmdir()
            raise
        return store

    # ----------------------------------------------------------------- reading
    @property
    def model_sha256(self) -> str:
        """Digest identifying the model whose outputs the store holds."""
        return str(self.manifest["model"]["sha256"])

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self.manifest["model"])

    @property
    def has_head(self) -> bool:
        """Whether model.h5 holds a classifier head (W, b) (`"has_head": false` says not)."""
        return self.manifest.get("has_head", True) is not False

    @property
    def head(self) -> tuple[np.ndarray, np.ndarray]:
        """(W, b): the classifier head, (C, D) and (C,) float32; NoHeadError for a store
        without one."""
        if not self.has_head:
            raise NoHeadError(f"store {str(self.path)!r} has no classifier head (W, b): it holds "
                              "features and the model's logits only (a non-linear head, or "
                              "features imported without head/weight)")
        if self._head is None:
            with self._model_file() as fh:
                weight, bias = fh.get("head/weight"), fh.get("head/bias")
                c, d = int(self.manifest["num_classes"]), int(self.manifest["feature_dim"])
                if not isinstance(weight, h5py.Dataset) or not isinstance(bias, h5py.Dataset) \
                        or weight.shape != (c, d) or bias.shape != (c,) \
                        or weight.dtype.kind != "f" or bias.dtype.kind != "f":
                    raise InputError(f"store {str(self.path)!r}: {MODEL_FILE} lacks a head of "
                                     f"shape ({c}, {d}) + ({c},) as the manifest says; rebuild "
                                     "the store")
                self._head = (weight[()].astype(np.float32, copy=False),
                              bias[()].astype(np.float32, copy=False))
        return self._head

    @contextlib.contextmanager
    def _model_file(self) -> Iterator[h5py.File]:
        path = self.path / MODEL_FILE
        where = f"store {str(self.path)!r}: {MODEL_FILE}"
        try:
            require_regular_file(path, MODEL_FILE)
            fh = h5py.File(path, "r")
        except LinkError as exc:
            raise InputError(f"store {str(self.path)!r}: {exc.strerror}") from None
        except OSError as exc:
            raise InputError(f"{where} is missing or unreadable ({exc}); rebuild the store"
                             ) from exc
        try:
            problem = hdf5_link_problem(fh)
            if problem:
                raise InputError(f"{where}: {problem}")
            yield fh
        except (OSError, KeyError) as exc:
            raise InputError(f"{where} is damaged ({exc}); rebuild the store") from exc
        finally:
            fh.close()

    @property
    def classes(self) -> list[str]:
        with self._model_file() as fh:
            ds = fh.get("classes")
            if not isinstance(ds, h5py.Dataset) or ds.shape != (self.manifest["num_classes"],):
                raise InputError(f"store {str(self.path)!r}: {MODEL_FILE} has no /classes of "
                                 f"{self.manifest['num_classes']} names; rebuild the store")
            return list(ds.asstr()[()])

    def splits(self, role: str | None = None, usage: str | None = None) -> list[str]:
        """Complete splits in manifest order, optionally filtered by role and usage."""
        out = []
        for name, entry in self.manifest["splits"].items():
            if not entry.get("complete"):
                continue
            if role is not None and entry["role"] != role:
                continue
            if usage is not None and entry.get("usage") != usage:
                continue
            out.append(name)
        return out

    def has_split(self, name: str) -> bool:
        return name in self.splits()

    def split(self, name: str) -> Split:
        """A complete split by name; UsageError listing the available ones otherwise."""
        if name not in self._splits:
            entry = self.manifest["splits"].get(name)
            if entry is None or not entry.get("complete"):
                state = "is incomplete" if entry is not None else "does not exist"
                avail = ", ".join(self.splits()) or "none"
                raise UsageError(
                    f"store {str(self.path)!r}: split {name!r} {state} (available: {avail})"
                )
            self._splits[name] = Split(self, entry)
        return self._splits[name]

    def verify(self) -> list[str]:
        """Check every file the manifest names: model.h5 (its sha256 where the manifest
        records it; its head's shape and links always) and every complete split's file
        (regular file inside the store, sha256, HDF5 structure and links); one message per
        problem."""
        problems = []
        record = self.manifest.get("model_file")
        try:
            require_regular_file(self.path / MODEL_FILE, MODEL_FILE)
            if isinstance(record, dict) and record.get("sha256") != sha256_file(
                    self.path / MODEL_FILE):
                problems.append(f"{MODEL_FILE}: sha256 does not match the manifest")
            self._head = None
            if self.has_head:
                self.head  # noqa: B018 - reads and checks the head
        except FileNotFoundError:
            problems.append(f"{MODEL_FILE} is missing")
        except LinkError as exc:
            problems.append(str(exc.strerror))
        except FeatstoreError as exc:
            problems.append(str(exc))
        problems.extend(split_problems(self.path, self.manifest))
        return problems

    def check_committed(self, name: str) -> None:
        """InputError unless split `name`'s file is the one committed for it
        (`featstore.store.verify.check_committed`)."""
        check_committed(self, name)

    def close(self) -> None:
        for split in self._splits.values():
            split.close()
        self._splits.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- writing
    def _require_writable(self) -> None:
        if not self.writable:
            raise UsageError(f"store {str(self.path)!r} is open read-only; use mode='a'")

    def split_file(self, name: str) -> Path:
        return self.path / SPLITS_DIR / f"{parse_split_name(name).slug}.h5"

    def save_manifest(self) -> None:
        """Write the in-memory manifest atomically (under the store lock)."""
        self._require_writable()
        with self.writing():
            atomic_write_json(self.path / MANIFEST, self.manifest)

    def update_manifest(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply `change` to the manifest as it is on disk now and write it atomically, all
        under the store lock: a change never drops what another writer committed since this
        store was opened."""
        self._require_writable()
        with self.writing():
            try:
                current = validate_manifest(self.path, read_manifest(self.path))
            except InputError:
                current = self.manifest
            change(current)
            atomic_write_json(self.path / MANIFEST, current)
            self.manifest = current
            self._splits = {k: v for k, v in self._splits.items()
                            if v.entry is current["splits"].get(k)}

    def mark_incomplete(self, name: str, source: Mapping[str, Any] | None, usage: str) -> None:
        """Record that `name` is being written (visible to `info`, not to readers)."""
        parsed = parse_split_name(name)

        def change(manifest: dict[str, Any]) -> None:
            entry = manifest["splits"].get(name, {})
            entry.update({"name": name, "role": parsed.role, "group": parsed.group,
                          "usage": usage, "source": dict(source or {}), "complete": False})
            manifest["splits"][name] = entry

        self._splits.pop(name, None)
        self.update_manifest(change)

    def commit_split(
        self, name: str, tmp_file: Path, *, usage: str, source: Mapping[str, Any] | None,
        extra_meta: Mapping[str, Any] | None = None,
    ) -> Split:
        """Move a fully written split file into place and mark it complete in the manifest.

        Order: fsync the file, hash it, rename it into splits/, fsync the directory, then write
        the manifest atomically. A crash before the last step leaves the split incomplete.
        """
        self._require_writable()
        parsed = parse_split_name(name)
        with self.writing():
            fsync_file(tmp_file)
            digest = sha256_file(tmp_file)
            with h5py.File(tmp_file, "r") as fh:
                feats, logits = fh["features"], fh["logits"]
                entry: dict[str, Any] = {
                    "name": name, "role": parsed.role, "group": parsed.group, "usage": usage,
                    "source": dict(source or {}),
                    "num_rows": int(feats.shape[0]),
                    "dims": {"features": int(feats.shape[1]), "logits": int(logits.shape[1])},
                    "dtype": str(feats.dtype),
                    "extras": {n: list(fh["extra"][n].shape) for n in extra_names(fh)},
                    "nonfinite": nonfinite_record(fh),
                }
            final = self.split_file(name)
            require_real_dir(final.parent, "splits directory")
            os.replace(tmp_file, final)
            fsync_dir(final.parent)
            st = os.lstat(final)
            entry.update({"file": f"{SPLITS_DIR}/{final.name}", "sha256": digest,
                          "size_bytes": st.st_size, "complete": True})
            entry.update(extra_meta or {})
            self._splits.pop(name, None)
            self.update_manifest(lambda m: m["splits"].__setitem__(name, entry))
            record = stat_record(self.path)
            record[entry["file"]] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
            atomic_write_json(self.path / STAT_FILE, record)
        return self.split(name)

    def write_split(
        self,
        name: str,
        *,
        features: ArrayLike,
        logits: ArrayLike | None = None,
        labels: ArrayLike | None = None,
        ids: ArrayLike | None = None,
        extras: Mapping[str, Any] | None = None,
        usage: str | None = None,
        source: Mapping[str, Any] | None = None,
        dtype: str = "float32",
    ) -> Split:
        """Write a whole split from in-memory arrays, validating shapes against the head
        (the manifest's C and D for a store without one, whose splits must give logits)."""
        self._require_writable()
        head = self.head if self.has_head else None
        arrays = prepare_split(name, head, features=features, logits=logits, labels=labels,
                               ids=ids, extras=extras, usage=usage, dtype=dtype)
        feats, logits, labels, ids = arrays.features, arrays.logits, arrays.labels, arrays.ids
        extras_np, row_axes, usage = arrays.extras, arrays.row_axes, arrays.usage
        c, d = int(self.manifest["num_classes"]), int(self.manifest["feature_dim"])
        if feats.shape[1] != d or logits.shape[1] != c:  # a store without a head: its C, D
            raise UsageError(f"split {name!r}: features and logits must be (N, D={d}) and "
                             f"(N, C={c}), got {feats.shape} and {logits.shape}")
        with self.writing():
            need = feats.nbytes + logits.nbytes + labels.nbytes + \
                sum(len(i) + 16 for i in ids) + sum(a.nbytes for a in extras_np.values())
            check_space(self.path / SPLITS_DIR, int(need), f"split {name!r}")
            self.mark_incomplete(name, source, usage)
            tmp = exclusive_tmp(self.split_file(name))
            try:
                write_split_file(tmp, features=feats, logits=logits,
                                 labels=labels, ids=ids, extras=extras_np,
                                 extra_row_axes=row_axes)
                return self.commit_split(name, tmp, usage=usage, source=source)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                raise


def _replace_store(cls: type[Store], path: Path, arrays: dict[str, Any]) -> Store:
    """`Store.from_arrays(path, overwrite=True, **arrays)` over an existing store: the new
    store is first written in full to a sibling staging directory (every array validated, every
    file fsynced); only then, under the store's lock, are the old store's own files removed and
    the new ones renamed in (the manifest last). Any error before that point leaves the old
    store untouched; the staging directory is always removed."""
    path = Path(os.path.abspath(path))
    staging = path.parent / f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        cls.from_arrays(staging, **arrays)
        with StoreLock(path):
            remove_own_files(path)
            names = [n for n in OWN_FILES if n not in (MANIFEST, LOCK_FILE)] + [MANIFEST]
            for name in names:
                if os.path.lexists(staging / name):
                    os.replace(staging / name, path / name)
            fsync_dir(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cls.open(path, mode="a")


def _head_arrays(head: tuple[Any, Any] | None, dims: tuple[int, int] | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(W, b) as float32 arrays; for `head=None`, zero-size placeholders of `dims` = (C, D)
    (never written: they only carry the widths)."""
    if head is None:
        if dims is None or len(dims) != 2 or min(int(dims[0]), int(dims[1])) < 1:
            raise UsageError(f"a store without a head needs dims (C, D) >= 1, got {dims!r}")
        return (np.zeros((int(dims[0]), int(dims[1])), np.float32),
                np.zeros(int(dims[0]), np.float32))
    return prepare_head(head)


def _headless_dims(splits: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[int, int], str]:
    """(C, D) of headless arrays (the first split's logits and features; every split must
    give logits) and the sha256 of every split's features and logits."""
    arrays: dict[str, np.ndarray] = {}
    for name, fields in splits.items():
        if fields.get("logits") is None:
            raise UsageError(f"split {name!r}: no logits; a store without a head (W, b) needs "
                             "every split's logits")
        arrays[f"{name}/features"] = np.asarray(fields["features"])
        arrays[f"{name}/logits"] = np.asarray(fields["logits"])
    if not arrays:
        raise UsageError("a store without a head needs at least one split")
    first = next(iter(splits))
    feats, logits = arrays[f"{first}/features"], arrays[f"{first}/logits"]
    if feats.ndim != 2 or logits.ndim != 2:
        raise UsageError(f"split {first!r}: features and logits must be (N, D) and (N, C), got "
                         f"{feats.shape} and {logits.shape}")
    return (int(logits.shape[1]), int(feats.shape[1])), sha256_arrays(arrays)
