"""Small file helpers: atomic writes, fsync, sha256 of files and of array dictionaries."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_BLOCK = 1 << 22


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync a file's contents."""
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically: write `path.tmp`, fsync, rename over `path`, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(obj, indent=2, sort_keys=False) + "\n"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def sha256_arrays(arrays: Mapping[str, Any]) -> str:
    """Hex sha256 over named arrays in sorted key order: name, dtype, shape and bytes of each.

    Used for a model's state dict (tensors converted by the caller) or a bring-your-own head,
    so the same weights give the same digest whatever file they came from.
    """
    h = hashlib.sha256()
    for key in sorted(arrays):
        arr = np.ascontiguousarray(np.asarray(arrays[key]))
        h.update(key.encode())
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()
