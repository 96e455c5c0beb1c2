"""The store's manifest and its own files (DESIGN §2): `store.json`, the names a store writes,
and the rules a manifest must satisfy before a reader trusts it.

`validate_manifest` checks every field readers rely on (format version, model digest, per
split: name, role, file at `splits/<slug>.h5`, dims, dtype) and names the first bad one;
`read_manifest` reads store.json as a regular file (never through a link). `is_own_layout`
and `remove_own_files` recognise and delete only what a store itself writes (OWN_FILES at the
top, split artifacts under splits/), so `--overwrite` never removes the user's files.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.store.fileio import LinkError, read_regular, remove_stale
from featstore.store.layout import FEATURE_DTYPES
from featstore.store.lock import LOCK_FILE
from featstore.store.names import parse_split_name

FORMAT_VERSION = 1
MANIFEST = "store.json"
MODEL_FILE = "model.h5"
SPLITS_DIR = "splits"
STAT_FILE = ".featstore.stat"
USAGES = ("train", "val", "test")
# every name a store itself writes at its top level: --overwrite removes these and nothing else
OWN_FILES = (MANIFEST, MANIFEST + ".tmp", MODEL_FILE, MODEL_FILE + ".tmp", "scores.h5",
             STAT_FILE, STAT_FILE + ".tmp", LOCK_FILE, SPLITS_DIR)
_REQUIRED_MANIFEST = {"format_version": int, "model": dict, "splits": dict,
                      "num_classes": int, "feature_dim": int}
_COMPLETE_FIELDS = {"num_rows": int, "dims": dict, "dtype": str, "sha256": str, "file": str}


def default_usage(name: str) -> str:
    """`train`/`val`/`test` for id/train, id/val, id/test; `test` for everything else."""
    parsed = parse_split_name(name)
    if parsed.role == "id" and parsed.leaf in USAGES:
        return parsed.leaf
    return "test"


def validate_manifest(path: Path, manifest: Any) -> dict[str, Any]:
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


def read_manifest(path: Path) -> Any:
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
    except (json.JSONDecodeError, RecursionError) as exc:
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
