"""Small file helpers: atomic writes, fsync, sha256 of files and of array dictionaries, and
the no-symlink rules of a store (DESIGN §9: a store is untrusted input).

Writers never follow a symbolic link: every directory a writer writes into is checked with
lstat (`require_real_dir`), every temporary file is created exclusively (`O_CREAT | O_EXCL |
O_NOFOLLOW`, or HDF5's exclusive create, which fails on any existing name, a dangling link
included) after a stale one is unlinked (unlink removes a link, never its target), and the
final name is taken by rename, which replaces a link instead of writing through it. Result
files outside a store (a command's `--out`) are written with `atomic_write_output`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import secrets
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError

_BLOCK = 1 << 22
# bytes kept free beyond a file's estimated size (HDF5 metadata, the filesystem's own needs)
SPACE_MARGIN = 1 << 20


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


class LinkError(OSError):
    """A path a writer was about to use is a symbolic link (or not what it must be)."""


def is_link(path: Path) -> bool:
    """Whether `path` itself is a symbolic link (never follows it)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def require_real_dir(path: Path, what: str = "directory") -> None:
    """LinkError unless `path` is a directory and not a symbolic link (lstat)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise LinkError(errno.ENOENT, f"{what} {str(path)!r} does not exist") from None
    if stat.S_ISLNK(mode):
        raise LinkError(errno.ELOOP, f"{what} {str(path)!r} is a symbolic link; featstore "
                                     "never writes through links in a store")
    if not stat.S_ISDIR(mode):
        raise LinkError(errno.ENOTDIR, f"{what} {str(path)!r} is not a directory")


def make_real_dir(path: Path, what: str = "directory") -> None:
    """mkdir `path` (parents too) unless it exists; then require_real_dir."""
    if not os.path.lexists(path):
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True)
    require_real_dir(path, what)


def remove_stale(path: Path) -> None:
    """Unlink `path` if it exists (a file or a link: the link itself, never its target);
    a directory at that name is removed as a tree without following links in it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def exclusive_tmp(path: Path) -> Path:
    """A fresh temporary name next to `path` (`path.tmp`), with any stale file or link at that
    name removed; the caller creates it exclusively (HDF5 mode 'x' or `open_exclusive`)."""
    require_real_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    remove_stale(tmp)
    return tmp


def open_exclusive(path: Path) -> int:
    """os.open a new file for writing: O_CREAT | O_EXCL | O_NOFOLLOW (fails on any existing
    name, a link included)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)


def _write_and_replace(fd: int, tmp: Path, path: Path, data: bytes) -> None:
    """Write `data` to the open temporary `tmp` (fd), fsync it, rename it over `path` and fsync
    the directory; on any failure the temporary is removed and `path` is untouched."""
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` atomically and without following links: an exclusive `path.tmp`, fsync,
    rename over `path` (which replaces a link at `path`, never writes through it), fsync the
    directory."""
    path = Path(path)
    tmp = exclusive_tmp(path)
    _write_and_replace(open_exclusive(tmp), tmp, path, data)


def atomic_write_output(path: str | Path, data: bytes | str) -> Path:
    """Write a result file (a command's `--out` JSON, Markdown, .npz, .npy) atomically: a
    fresh temporary in the same directory (`.NAME.*.tmp`, unique, so concurrent writers never
    share it), fsync, rename over `path`, fsync the directory. A reader sees the old file or
    the whole new one, never a part; a failed write leaves `path` as it was and no temporary
    behind, and the OSError names `path`. `str` data is written as UTF-8. Unlike a store's
    files, the directory may be reached through links; a missing directory is
    FileNotFoundError naming `path`."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory (the folder is "
                                "missing)", str(path))
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        _write_and_replace(open_exclusive(tmp), tmp, path, data)
    except OSError as exc:
        if exc.filename is not None and exc.filename != str(tmp):
            raise
        # name the result file, not the temporary or nothing (a failed write or fsync)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    return path


def atomic_write_result_json(path: str | Path, obj: Any) -> Path:
    """`atomic_write_output` of `json.dumps(obj, indent=2)` and a newline (what every
    `--out results.json` holds)."""
    return atomic_write_output(path, json.dumps(obj, indent=2) + "\n")


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (atomic_write_bytes: exclusive tmp, fsync, rename, fsync dir)."""
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def atomic_save_npz(path: str | Path, arrays: Mapping[str, Any]) -> Path:
    """`np.savez(path, **arrays)` written atomically (`atomic_write_output`); like NumPy, a
    name without `.npz` gets it appended. Returns the path written."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return atomic_write_output(path, buffer.getvalue())


def atomic_save_npy(path: str | Path, array: Any) -> Path:
    """`np.save(path, array)` written atomically; like NumPy, `.npy` is appended to a name
    without it. Returns the path written."""
    path = Path(path)
    if path.suffix != ".npy":
        path = path.with_name(path.name + ".npy")
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return atomic_write_output(path, buffer.getvalue())


def read_regular(path: Path, what: str = "file") -> bytes:
    """The bytes of `path`, refusing a symbolic link (O_NOFOLLOW) or anything not a regular
    file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkError(errno.ELOOP, f"{what} {str(path)!r} is a symbolic link; featstore "
                                         "never follows links in a store") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise LinkError(errno.EINVAL, f"{what} {str(path)!r} is not a regular file")
        return fh.read()


def require_regular_file(path: Path, what: str = "file") -> os.stat_result:
    """lstat of `path`; LinkError if it is a link or not a regular file, FileNotFoundError
    if it is missing."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise LinkError(errno.ELOOP, f"{what} {str(path)!r} is a symbolic link; featstore "
                                     "never follows links in a store")
    if not stat.S_ISREG(st.st_mode):
        raise LinkError(errno.EINVAL, f"{what} {str(path)!r} is not a regular file")
    return st


def free_bytes(path: Path) -> int:
    """Bytes a write under directory `path` may still add: the filesystem's free space for
    this user, capped by the process's RLIMIT_FSIZE (largest file it may write)."""
    free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
    try:
        import resource  # POSIX only: absent on Windows

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            free = min(free, int(soft))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    return int(free)


def room_to_grow(directory: Path, size: int, extra: int) -> str | None:
    """Why a file of `size` bytes under `directory` may not grow by `extra` bytes, or None:
    the filesystem's free space for this user must hold `extra`, and the process's
    RLIMIT_FSIZE (`ulimit -f`: the largest file it may write) `size + extra`. HDF5 meeting
    EFBIG or ENOSPC in the middle of a write can leave a damaged file or crash, so writers
    of files that grow in place (the score cache) ask first."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    if free < extra:
        return f"needs {extra:,} bytes but only {free:,} are free in {str(directory)!r}"
    try:
        import resource  # POSIX only: absent on Windows

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None
    if soft != resource.RLIM_INFINITY and size + extra > soft:
        return (f"it would grow to {size + extra:,} bytes, past the file-size limit "
                f"(ulimit -f) of {int(soft):,} bytes")
    return None


class DiskFullError(FeatstoreError):
    """Not enough free space (or RLIMIT_FSIZE) for the next file a writer would write."""


def check_space(directory: Path, need: int, what: str) -> None:
    """DiskFullError naming `what`, the bytes it needs and those free under `directory`."""
    free = free_bytes(directory)
    if free < need + SPACE_MARGIN:
        raise DiskFullError(f"{what} needs about {need + SPACE_MARGIN:,} bytes but only "
                            f"{free:,} are free in {str(directory)!r} (or allowed by the "
                            "file-size limit); free some space and rerun: completed splits and "
                            "parts are kept and the extraction resumes")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
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
