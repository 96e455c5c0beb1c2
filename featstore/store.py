"""The store (DESIGN §2-§3): a directory of HDF5 split files indexed by a JSON manifest.

    STORE/store.json        manifest, written atomically (tmp, fsync, rename)
    STORE/model.h5          /head/weight (C, D) f32, /head/bias (C,) f32, /classes (C,) utf-8
    STORE/splits/<slug>.h5  one file per split
    STORE/scores.h5         cached scores (scorers.cache)

A split is visible to readers only when the manifest lists it with `complete: true`; its file
is renamed into place before the manifest says so, so a reader never sees a half-written split.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from . import __version__
from .errors import FeatstoreError, InputError, UsageError
from .fileio import atomic_write_json, fsync_dir, fsync_file, sha256_arrays, sha256_file
from .layout import FEATURE_DTYPES, ROW_AXIS_ATTR, STRING_DTYPE, extra_names, write_split_file
from .names import parse_split_name

FORMAT_VERSION = 1
MANIFEST = "store.json"
MODEL_FILE = "model.h5"
SPLITS_DIR = "splits"
DEFAULT_CHUNK_ROWS = 8192
USAGES = ("train", "val", "test")


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

    def _file(self) -> h5py.File:
        if self._fh is None or not self._fh.id.valid:
            self._datasets = {}
            try:
                self._fh = h5py.File(self.path, "r")
            except OSError as exc:  # a FeatstoreError: scorers' `except UsageError` lets it out
                raise FeatstoreError(
                    f"store {str(self._store.path)!r}: split {self.name!r}: unreadable file "
                    f"{str(self.path)!r} ({exc}); check it with `featstore info --verify` and "
                    "re-extract the split"
                ) from exc
        return self._fh

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
        if key not in fh or not isinstance(fh[key], h5py.Dataset):
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
            ds.read_direct(out, np.s_[start:stop], np.s_[0:stop - start])

    def read(self, field: str, rows: slice | None = None) -> np.ndarray:
        """Read a field (optionally a row slice); floating arrays come back as float32."""
        rows = rows if rows is not None else slice(None)
        if field.startswith("extra:"):
            name = field[len("extra:"):]
            ds = self.extra(name)
            axis = int(ds.attrs.get(ROW_AXIS_ATTR, 0))
            index = (slice(None),) * axis + (rows,)
            arr = ds[index]
        elif field in ("features", "logits", "labels"):
            arr = self._dataset(field)[rows]
        else:
            raise UsageError(
                f"unknown field {field!r}; expected features, logits, labels or extra:<name>"
            )
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        return arr

    def close(self) -> None:
        if self._fh is not None and self._fh.id.valid:
            self._fh.close()
        self._fh = None
        self._datasets = {}


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
        if not mpath.is_file():
            what = "does not exist" if not path.exists() else f"has no {MANIFEST}"
            raise InputError(f"store {str(path)!r} {what}; create one with `featstore extract` "
                             "or `featstore import`")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"store {str(path)!r}: unreadable {MANIFEST}: {exc}") from exc
        if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict) \
                or not isinstance(manifest.get("model"), dict):
            raise InputError(f"store {str(path)!r}: {MANIFEST} is not a featstore manifest "
                             "(no 'model' / 'splits'); rebuild the store")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise FeatstoreError(
                f"store {str(path)!r}: format_version {version!r}, this featstore reads "
                f"{FORMAT_VERSION}"
            )
        return cls(path, manifest, writable=(mode == "a"))

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
        if path.exists():
            if not overwrite:
                raise UsageError(f"store {str(path)!r} already exists; pass --overwrite to replace")
            shutil.rmtree(path)
        path.mkdir(parents=True)
        (path / SPLITS_DIR).mkdir()
        with h5py.File(path / MODEL_FILE, "w") as fh:
            fh.create_dataset("head/weight", data=weight, track_times=False)
            fh.create_dataset("head/bias", data=bias, track_times=False)
            fh.create_dataset("classes", data=np.asarray(classes, dtype=object),
                              dtype=STRING_DTYPE, track_times=False)
        fsync_file(path / MODEL_FILE)
        model = dict(provenance or {})
        model.setdefault("sha256", sha256_arrays({"weight": weight, "bias": bias}))
        manifest = {
            "format_version": FORMAT_VERSION,
            "featstore_version": __version__,
            "model": model,
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
        store = cls.create(path, head=head, classes=classes, provenance=provenance,
                           overwrite=overwrite)
        try:
            for name, arrays in splits.items():
                store.write_split(name, dtype=dtype, **arrays)
        except BaseException:
            shutil.rmtree(store.path, ignore_errors=True)
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
            try:
                with h5py.File(self.path / MODEL_FILE, "r") as fh:
                    self._head = (fh["head/weight"][()], fh["head/bias"][()])
            except (OSError, KeyError) as exc:
                raise FeatstoreError(f"store {str(self.path)!r}: unreadable {MODEL_FILE} ({exc}); "
                                 "rebuild the store") from exc
        return self._head

    @property
    def classes(self) -> list[str]:
        with h5py.File(self.path / MODEL_FILE, "r") as fh:
            return list(fh["classes"].asstr()[()])

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
        """Recompute every split file's sha256; return one message per mismatch or missing file."""
        problems = []
        for name, entry in self.manifest["splits"].items():
            if not entry.get("complete"):
                continue
            fpath = self.path / entry["file"]
            if not fpath.is_file():
                problems.append(f"split {name!r}: file {entry['file']} is missing")
                continue
            digest = sha256_file(fpath)
            if digest != entry["sha256"]:
                problems.append(
                    f"split {name!r}: sha256 {digest[:12]}… does not match manifest "
                    f"{entry['sha256'][:12]}…"
                )
        return problems

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
        """Write the manifest atomically."""
        self._require_writable()
        atomic_write_json(self.path / MANIFEST, self.manifest)

    def mark_incomplete(self, name: str, source: Mapping[str, Any] | None, usage: str) -> None:
        """Record that `name` is being written (visible to `info`, not to readers)."""
        self._require_writable()
        parsed = parse_split_name(name)
        entry = self.manifest["splits"].get(name, {})
        entry.update({"name": name, "role": parsed.role, "group": parsed.group, "usage": usage,
                      "source": dict(source or {}), "complete": False})
        self.manifest["splits"][name] = entry
        self._splits.pop(name, None)
        self.save_manifest()

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
            }
        final = self.split_file(name)
        os.replace(tmp_file, final)
        fsync_dir(final.parent)
        entry.update({"file": f"{SPLITS_DIR}/{final.name}", "sha256": digest,
                      "size_bytes": final.stat().st_size, "complete": True})
        entry.update(extra_meta or {})
        self.manifest["splits"][name] = entry
        self._splits.pop(name, None)
        self.save_manifest()
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
        self.mark_incomplete(name, source, usage)
        tmp = self.split_file(name).with_suffix(".h5.tmp")
        try:
            write_split_file(tmp, features=feats.astype(dtype), logits=logits, labels=labels,
                             ids=ids, extras=extras_np, extra_row_axes=row_axes)
            return self.commit_split(name, tmp, usage=usage, source=source)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
