"""The store (DESIGN §2-§3): a directory of HDF5 split files indexed by a JSON manifest.

    STORE/store.json        manifest, written atomically (tmp, fsync, rename)
    STORE/model.h5          /head/weight (C, D) f32, /head/bias (C,) f32, /classes (C,) utf-8
    STORE/splits/<slug>.h5  one file per split
    STORE/scores.h5         cached scores (scorers.cache)

A split is visible to readers only when the manifest lists it with `complete: true`; its file
is renamed into place before the manifest says so, so a reader never sees a half-written split.

Trust (DESIGN §9): a store is untrusted input. Writers hold the store lock (featstore.lock),
merge their change into the manifest as it is on disk (another writer's committed splits are
never dropped) and never follow symbolic links (featstore.fileio). Readers validate the
manifest's fields, accept a split file only at `splits/<slug>.h5` inside the store, refuse
links (symbolic, HDF5 soft and external, external or virtual dataset storage), check a file's
shapes against the manifest and the head, and check that the file is the one committed: its
size and, when its stat (size, mtime, inode) differs from the one recorded at commit in
`.featstore.stat`, its sha256 (hashed once, then recorded). `verify` hashes every file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import FeatstoreError, InputError, UsageError
from .fileio import (
    LinkError,
    atomic_write_json,
    check_space,
    exclusive_tmp,
    fsync_dir,
    fsync_file,
    make_real_dir,
    read_regular,
    remove_stale,
    require_real_dir,
    require_regular_file,
    sha256_arrays,
    sha256_file,
)
from .layout import FEATURE_DTYPES, ROW_AXIS_ATTR, STRING_DTYPE, extra_names, write_split_file
from .lock import LOCK_FILE, StoreLock
from .names import parse_split_name
from .values import check_float16_range, nonfinite_record
from .version import __version__

FORMAT_VERSION = 1
MANIFEST = "store.json"
MODEL_FILE = "model.h5"
SPLITS_DIR = "splits"
STAT_FILE = ".featstore.stat"
DEFAULT_CHUNK_ROWS = 8192
USAGES = ("train", "val", "test")
# every name a store itself writes at its top level: --overwrite removes these and nothing else
OWN_FILES = (MANIFEST, MANIFEST + ".tmp", MODEL_FILE, MODEL_FILE + ".tmp", "scores.h5",
             STAT_FILE, STAT_FILE + ".tmp", LOCK_FILE, SPLITS_DIR)
_REQUIRED_MANIFEST = {"format_version": int, "model": dict, "splits": dict,
                      "num_classes": int, "feature_dim": int}
_COMPLETE_FIELDS = {"num_rows": int, "dims": dict, "dtype": str, "sha256": str, "file": str}
_verified: dict[tuple[str, int, int, int], str] = {}  # (path, size, mtime_ns, ino) -> sha256


def default_usage(name: str) -> str:
    """`train`/`val`/`test` for id/train, id/val, id/test; `test` for everything else."""
    parsed = parse_split_name(name)
    if parsed.role == "id" and parsed.leaf in USAGES:
        return parsed.leaf
    return "test"


class Split:
    """One split of a store; arrays are lazy h5py datasets (np.asarray(...) loads them)."""

    def __init__(self, store: Store, entry: Mapping[str, Any]):
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

    def __repr__(self) -> str:
        return f"Split({self.name!r}, rows={self.num_rows}, dims={self.dims}, dtype={self.dtype})"

    @property
    def path(self) -> Path:
        return self._store.path / self.entry["file"]

    def _where(self) -> str:
        return f"store {str(self._store.path)!r}: split {self.name!r}"

    def _broken(self, what: str) -> InputError:
        return InputError(f"{self._where()}: {what}; check it with `featstore info --verify` "
                          "and re-extract the split")

    def _file(self) -> h5py.File:
        if self._fh is None or not self._fh.id.valid:
            self._datasets = {}
            self._store.check_committed(self.name)
            try:
                fh = h5py.File(self.path, "r")
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

    def nonfinite_record(self) -> dict[str, list]:
        """{field: [rows holding NaN or inf, first such rows]} (featstore.values), from the
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
        return self._file()["ids"].asstr()[()]

    def extra_names(self) -> list[str]:
        """Names of the extra arrays stored with this split."""
        return extra_names(self._file())

    def has_extra(self, name: str) -> bool:
        """Whether extra `name` exists; a group name (e.g. `odin_logits`) counts when it holds
        at least one array."""
        names = self.extra_names()
        return name in names or any(n.startswith(name + "/") for n in names)

    def extra(self, name: str) -> h5py.Dataset:
        """An extra array (DESIGN §2), e.g. `mc_logits`; error naming the available ones."""
        fh = self._file()
        key = f"extra/{name}"
        if key not in fh or not isinstance(fh.get(key), h5py.Dataset):
            avail = ", ".join(self.extra_names()) or "none"
            raise UsageError(
                f"split {self.name!r} has no extra {name!r} (available: {avail})"
            )
        return fh[key]

    def extra_row_axis(self, name: str) -> int:
        return int(self.extra(name).attrs.get(ROW_AXIS_ATTR, 0))

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
            if int(ds.attrs.get(ROW_AXIS_ATTR, 0)) != 0:
                raise UsageError(f"extra {name!r} of split {self.name!r} is not row-major; "
                                 "read it with Split.read")
            return ds
        raise UsageError(
            f"unknown field {field!r}; expected features, logits, labels or extra:<name>"
        )

    def read_into(self, ds: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> None:
        """Read rows start..stop of a row-major dataset into `out` (same dtype, stop - start
        rows), without allocating."""
        if stop > start:
            try:
                ds.read_direct(out, np.s_[start:stop], np.s_[0:stop - start])
            except OSError as exc:
                raise self._broken(f"cannot read rows {start}..{stop} of {ds.name!r} "
                                   f"({exc})") from exc

    def read(self, field: str, rows: slice | None = None) -> np.ndarray:
        """Read a field (optionally a row slice); floating arrays come back as float32."""
        rows = rows if rows is not None else slice(None)
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            ds = self.extra(name)
            axis = int(ds.attrs.get(ROW_AXIS_ATTR, 0))
            index = (slice(None),) * axis + (rows,)
            arr = self._read_ds(ds, index)
        elif field in ("features", "logits", "labels"):
            arr = self._read_ds(self._dataset(field), rows)
        else:
            raise UsageError(
                f"unknown field {field!r}; expected features, logits, labels or extra:<name>"
            )
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        return arr

    def _read_ds(self, ds: h5py.Dataset, index: Any) -> np.ndarray:
        try:
            return ds[index]
        except OSError as exc:
            raise self._broken(f"cannot read {ds.name!r} ({exc})") from exc

    def close(self) -> None:
        if self._fh is not None and self._fh.id.valid:
            self._fh.close()
        self._fh = None
        self._datasets = {}


def hdf5_link_problem(fh: h5py.File) -> str | None:
    """Why an HDF5 file of a store may not be read, or None: any soft or external link, or a
    dataset whose data lives outside the file (external storage, a virtual dataset)."""
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
    link = hdf5_link_problem(fh)
    if link:
        return link
    n = int(entry["num_rows"])
    dims = entry["dims"]
    num_classes = int(manifest["num_classes"])
    want = {"features": (2, "f", "floats"), "logits": (2, "f", "floats"),
            "labels": (1, "iu", "integers"), "ids": (1, "OSU", "strings")}
    for key, (ndim, kinds, noun) in want.items():
        ds = fh.get(key)
        if not isinstance(ds, h5py.Dataset):
            return f"dataset {key!r} is missing"
        kind = "O" if h5py.check_string_dtype(ds.dtype) is not None else ds.dtype.kind
        if ds.ndim != ndim or kind not in kinds or h5py.check_vlen_dtype(ds.dtype) and \
                key != "ids":
            return f"dataset {key!r} is {ds.ndim}-D {ds.dtype}, expected {ndim}-D {noun}"
        if ds.shape[0] != n:
            return f"dataset {key!r} has {ds.shape[0]} rows, the manifest says {n}"
    for key in ("features", "logits"):
        if fh[key].shape[1] != int(dims.get(key, -1)):
            return (f"dataset {key!r} has width {fh[key].shape[1]}, the manifest says "
                    f"{dims.get(key)}")
    if int(dims["features"]) != int(manifest["feature_dim"]) or \
            int(dims["logits"]) != num_classes:
        return (f"features x logits are {dims['features']} x {dims['logits']} wide, the head is "
                f"{num_classes} x {manifest['feature_dim']}")
    if n:
        labels = fh["labels"][()]
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


def _validate_manifest(path: Path, manifest: Any) -> dict[str, Any]:
    """The manifest if every field readers rely on is there with the right type, else an
    InputError naming the field."""
    where = f"store {str(path)!r}: {MANIFEST}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict) \
            or not isinstance(manifest.get("model"), dict):
        raise InputError(f"store {str(path)!r}: {MANIFEST} is not a featstore manifest "
                         "(no 'model' / 'splits'); rebuild the store")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"store {str(path)!r}: format_version {version!r}, this featstore "
                         f"reads {FORMAT_VERSION}")
    for key, kind in _REQUIRED_MANIFEST.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise InputError(f"{where}: field {key!r} is missing or not a {kind.__name__}; "
                             "rebuild the store")
    if not isinstance(manifest["model"].get("sha256"), str):
        raise InputError(f"{where}: field 'model.sha256' is missing; rebuild the store")
    for name, entry in manifest["splits"].items():
        try:
            parsed = parse_split_name(name)
        except UsageError as exc:
            raise InputError(f"{where}: {exc}") from None
        if not isinstance(entry, dict):
            raise InputError(f"{where}: split {name!r} is not an object")
        entry.setdefault("name", name)
        entry.setdefault("role", parsed.role)
        if entry["name"] != name or entry["role"] != parsed.role:
            raise InputError(f"{where}: split {name!r} carries name {entry['name']!r} / role "
                             f"{entry['role']!r}")
        if not entry.get("complete"):
            continue
        for key, kind in _COMPLETE_FIELDS.items():
            if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
                raise InputError(f"{where}: split {name!r}: field {key!r} is missing or not a "
                                 f"{kind.__name__}; re-extract the split")
        want = f"{SPLITS_DIR}/{parsed.slug}.h5"
        if entry["file"] != want:
            raise InputError(f"{where}: split {name!r} names file {entry['file']!r}; a split's "
                             f"file must be {want!r} inside the store (featstore never reads "
                             "files outside a store)")
        dims = entry["dims"]
        if not all(isinstance(dims.get(k), int) for k in ("features", "logits")):
            raise InputError(f"{where}: split {name!r}: field 'dims' needs integer 'features' "
                             "and 'logits'")
        if entry["dtype"] not in FEATURE_DTYPES:
            raise InputError(f"{where}: split {name!r}: dtype {entry['dtype']!r} is not one of "
                             f"{', '.join(FEATURE_DTYPES)}")
    return manifest


def _read_manifest(path: Path) -> Any:
    try:
        raw = read_regular(path / MANIFEST, MANIFEST)
    except LinkError as exc:
        raise InputError(f"store {str(path)!r}: {exc.strerror}") from None
    except OSError as exc:
        raise InputError(f"store {str(path)!r}: unreadable {MANIFEST}: {exc}") from exc
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"store {str(path)!r}: unreadable {MANIFEST}: not UTF-8 text ({exc})"
                         ) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"store {str(path)!r}: unreadable {MANIFEST}: {exc}") from None


def is_own_layout(path: Path) -> bool:
    """Whether directory `path` holds only names a store writes (OWN_FILES at the top, split
    files / parts / temporaries under splits/): an unfinished store creation (killed between
    model.h5 and store.json) or a store, never a directory of someone else's files."""
    for child in path.iterdir():
        if child.name not in OWN_FILES:
            return False
        if child.name == SPLITS_DIR:
            if child.is_symlink() or not child.is_dir():
                return False
            if any(not _is_split_artifact(c.name) for c in child.iterdir()):
                return False
    return True


def _is_split_artifact(name: str) -> bool:
    for suffix in (".h5", ".h5.tmp", ".parts"):
        if name.endswith(suffix):
            slug = name[: -len(suffix)]
            try:
                parse_split_name(slug.replace("__", "/"))
            except UsageError:
                return False
            return True
    return False


def remove_own_files(path: Path) -> None:
    """Delete the store's own files under `path` (OWN_FILES; split artifacts in splits/) and
    nothing else; links are removed as links, never followed. The lock file stays (it is
    held)."""
    for name in OWN_FILES:
        child = path / name
        if name == LOCK_FILE or not os.path.lexists(child):
            continue
        if name == SPLITS_DIR and not child.is_symlink() and child.is_dir():
            for sub in child.iterdir():
                if _is_split_artifact(sub.name):
                    remove_stale(sub)
            with contextlib.suppress(OSError):
                child.rmdir()
            continue
        remove_stale(child)


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
    def open(cls, path: str | os.PathLike, mode: str = "r") -> Store:
        """Open an existing store; `mode='a'` allows adding splits."""
        if mode not in ("r", "a"):
            raise UsageError(f"Store.open: mode {mode!r} is not 'r' or 'a'")
        path = Path(path)
        mpath = path / MANIFEST
        if not os.path.lexists(mpath):
            what = "does not exist" if not path.exists() else f"has no {MANIFEST}"
            raise InputError(f"store {str(path)!r} {what}; create one with `featstore extract` "
                             "or `featstore import`")
        manifest = _validate_manifest(path, _read_manifest(path))
        try:
            require_regular_file(path / MODEL_FILE, MODEL_FILE)
        except FileNotFoundError:
            raise InputError(f"store {str(path)!r}: {MODEL_FILE} is missing; rebuild the store"
                             ) from None
        except LinkError as exc:
            raise InputError(f"store {str(path)!r}: {exc.strerror}") from None
        return cls(path, manifest, writable=(mode == "a"))

    def writing(self) -> StoreLock:
        """The store's write lock (featstore.lock), as a context manager."""
        return StoreLock(self.path)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        head: tuple[np.ndarray, np.ndarray],
        classes: list[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> Store:
        """Create an empty store for one model: writes model.h5 and the manifest.

        `provenance` is the model's record (name, architecture, sha256 of the weights, input
        transform, torch versions); without a `sha256` the digest of the head is used.
        An existing store is refused unless `overwrite`, which deletes it first.
        """
        path = Path(path)
        weight = np.ascontiguousarray(np.asarray(head[0], dtype=np.float32))
        bias = np.ascontiguousarray(np.asarray(head[1], dtype=np.float32))
        if weight.ndim != 2 or bias.shape != (weight.shape[0],):
            raise UsageError(
                f"head: expected weight (C, D) and bias (C,), got {weight.shape} and {bias.shape}"
            )
        num_classes = weight.shape[0]
        classes = [str(c) for c in classes] if classes is not None else [
            str(i) for i in range(num_classes)
        ]
        if len(classes) != num_classes:
            raise UsageError(f"classes: {len(classes)} names for a head with {num_classes} classes")
        if os.path.lexists(path) and not path.is_dir():
            raise UsageError(f"--out {str(path)!r} exists and is not a directory")
        make_real_dir(path, "store directory") if not path.is_dir() else None
        with StoreLock(path):
            has_store = os.path.lexists(path / MANIFEST)
            if has_store and not overwrite:
                raise UsageError(f"store {str(path)!r} already exists; pass --overwrite to "
                                 "replace it")
            if not is_own_layout(path):
                if has_store:  # a store with the user's files beside it: only ours go
                    remove_own_files(path)
                else:
                    names = sorted(c.name for c in path.iterdir())
                    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                    raise UsageError(
                        f"--out {str(path)!r} exists and is not a featstore store (it holds "
                        f"{shown}); --overwrite only replaces a featstore store: choose an "
                        "empty or new path, or remove the directory yourself")
            else:  # a store, or an unfinished creation (killed before store.json)
                remove_own_files(path)
            make_real_dir(path / SPLITS_DIR, "splits directory")
            tmp = exclusive_tmp(path / MODEL_FILE)
            with h5py.File(tmp, "x") as fh:
                fh.create_dataset("head/weight", data=weight, track_times=False)
                fh.create_dataset("head/bias", data=bias, track_times=False)
                fh.create_dataset("classes", data=np.asarray(classes, dtype=object),
                                  dtype=STRING_DTYPE, track_times=False)
            fsync_file(tmp)
            model_file_sha = sha256_file(tmp)
            os.replace(tmp, path / MODEL_FILE)
            fsync_dir(path)
            model = dict(provenance or {})
            model.setdefault("sha256", sha256_arrays({"weight": weight, "bias": bias}))
            manifest = {
                "format_version": FORMAT_VERSION,
                "featstore_version": __version__,
                "model": model,
                "model_file": {"file": MODEL_FILE, "sha256": model_file_sha},
                "num_classes": num_classes,
                "feature_dim": int(weight.shape[1]),
                "splits": {},
            }
            atomic_write_json(path / MANIFEST, manifest)
        return cls(path, manifest, writable=True)

    @classmethod
    def from_arrays(
        cls,
        path: str | os.PathLike,
        *,
        head: tuple[np.ndarray, np.ndarray],
        splits: Mapping[str, Mapping[str, Any]],
        classes: list[str] | None = None,
        provenance: Mapping[str, Any] | None = None,
        dtype: str = "float32",
        overwrite: bool = False,
    ) -> Store:
        """Build a store from arrays extracted anywhere (bring-your-own features).

        `splits` maps split names to dicts with `features`, `logits` (optional: computed as
        features @ W.T + b when absent), `labels` (optional: -1), `ids` (optional: row index),
        `extras` (optional dict) and `usage`/`source` (optional).
        """
        path = Path(path)
        existed = os.path.lexists(path)
        store = cls.create(path, head=head, classes=classes, provenance=provenance,
                           overwrite=overwrite)
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
    def head(self) -> tuple[np.ndarray, np.ndarray]:
        """(W, b): the classifier head, (C, D) and (C,) float32."""
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
            self.head  # noqa: B018 - reads and checks the head
        except FileNotFoundError:
            problems.append(f"{MODEL_FILE} is missing")
        except LinkError as exc:
            problems.append(str(exc.strerror))
        except FeatstoreError as exc:
            problems.append(str(exc))
        for name, entry in self.manifest["splits"].items():
            if not entry.get("complete"):
                continue
            fpath = self.path / entry["file"]
            try:
                require_real_dir(self.path / SPLITS_DIR, "splits directory")
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
                    problem = split_file_problem(fh, entry, self.manifest)
            except Exception as exc:
                problem = f"unreadable ({exc})"
            if problem:
                problems.append(f"split {name!r}: {problem}")
        return problems

    def check_committed(self, name: str) -> None:
        """InputError unless split `name`'s file is the regular file committed for it: inside
        the store, not a link, the size the manifest records, and (when its stat differs from
        the one recorded at commit) the sha256 the manifest records."""
        entry = self.manifest["splits"][name]
        where = f"store {str(self.path)!r}: split {name!r}"
        fpath = self.path / entry["file"]
        try:
            require_real_dir(self.path / SPLITS_DIR, "splits directory")
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
        stats = self._stat_record()
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
        self._record_stat(rel, fpath, digest)

    def _stat_record(self) -> dict[str, Any]:
        try:
            data = json.loads(read_regular(self.path / STAT_FILE, STAT_FILE))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _record_stat(self, rel: str, fpath: Path, digest: str) -> None:
        """Remember (size, mtime, inode, sha256) of a file just hashed in `.featstore.stat`
        so that later opens need not hash it; best effort (a read-only store keeps hashing)."""
        if not os.access(self.path, os.W_OK):
            return
        try:
            with StoreLock(self.path):
                record = self._stat_record()
                st = os.lstat(fpath)
                record[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
                atomic_write_json(self.path / STAT_FILE, record)
        except (OSError, FeatstoreError):
            pass

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
                current = _validate_manifest(self.path, _read_manifest(self.path))
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
            record = self._stat_record()
            record[entry["file"]] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
            atomic_write_json(self.path / STAT_FILE, record)
        return self.split(name)

    def write_split(
        self,
        name: str,
        *,
        features: Any,
        logits: Any | None = None,
        labels: Any | None = None,
        ids: Any | None = None,
        extras: Mapping[str, Any] | None = None,
        usage: str | None = None,
        source: Mapping[str, Any] | None = None,
        dtype: str = "float32",
    ) -> Split:
        """Write a whole split from in-memory arrays, validating shapes against the head."""
        self._require_writable()
        parsed = parse_split_name(name)
        usage = usage or default_usage(name)
        if usage not in USAGES:
            raise UsageError(f"split {name!r}: usage {usage!r} is not one of {USAGES}")
        if dtype not in FEATURE_DTYPES:
            raise UsageError(f"dtype {dtype!r} is not one of {FEATURE_DTYPES}")
        weight, bias = self.head
        feats = np.asarray(features)
        if feats.ndim != 2:
            raise UsageError(f"split {name!r}: features must be (N, D), got shape {feats.shape}")
        if feats.shape[1] != weight.shape[1]:
            raise UsageError(
                f"split {name!r}: features have D={feats.shape[1]} but the head expects "
                f"D={weight.shape[1]} (head weight {tuple(weight.shape)})"
            )
        if not np.issubdtype(feats.dtype, np.floating):
            raise UsageError(f"split {name!r}: features must be floating, got {feats.dtype}")
        if dtype == "float16":
            check_float16_range(name, "features", feats)
        n = feats.shape[0]
        if logits is None:
            logits = feats.astype(np.float32) @ weight.T + bias
        logits = np.asarray(logits, dtype=np.float32)
        if logits.shape != (n, weight.shape[0]):
            raise UsageError(
                f"split {name!r}: logits must be (N={n}, C={weight.shape[0]}), got {logits.shape}"
            )
        if labels is None:
            labels = np.full(n, -1, dtype=np.int64)
        labels = np.asarray(labels)
        if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
            raise UsageError(
                f"split {name!r}: labels must be (N={n},) integers, got {labels.shape} "
                f"{labels.dtype}"
            )
        labels = labels.astype(np.int64)
        if parsed.role != "ood" and ((labels < -1) | (labels >= weight.shape[0])).any():
            raise UsageError(
                f"split {name!r}: labels must lie in [-1, {weight.shape[0] - 1}]"
            )
        ids = np.arange(n).astype(str) if ids is None else np.asarray(ids).astype(str)
        if ids.shape != (n,):
            raise UsageError(f"split {name!r}: ids must be (N={n},), got {ids.shape}")
        extras_np = {k: np.asarray(v) for k, v in (extras or {}).items()}
        for key, arr in extras_np.items():
            if arr.ndim == 0 or n not in arr.shape[:2]:
                raise UsageError(f"split {name!r}: extra {key!r} shape {arr.shape} has no row axis"
                                 f" of length N={n}")
        row_axes = {k: (0 if a.shape[0] == n else 1) for k, a in extras_np.items()}
        with self.writing():
            need = feats.size * np.dtype(dtype).itemsize + logits.nbytes + labels.nbytes + \
                sum(len(i) + 16 for i in ids) + sum(a.nbytes for a in extras_np.values())
            check_space(self.path / SPLITS_DIR, int(need), f"split {name!r}")
            self.mark_incomplete(name, source, usage)
            tmp = exclusive_tmp(self.split_file(name))
            try:
                write_split_file(tmp, features=feats.astype(dtype), logits=logits,
                                 labels=labels, ids=ids, extras=extras_np,
                                 extra_row_axes=row_axes)
                return self.commit_split(name, tmp, usage=usage, source=source)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                raise
