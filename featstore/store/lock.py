"""One writer at a time per store: an advisory lock on `STORE/.featstore.lock`.

Every operation that writes a store's manifest, model file or split files holds the lock
(`StoreLock`); `featstore extract` holds it for its whole run. The lock is `flock(2)` on the
file (released by the kernel when the holder exits, kill -9 included, so a crashed writer
never leaves a stale lock behind); the holder writes its pid, host, command and start time into
the file so that a refused writer can name it. Within one process the lock is re-entrant (a
count per store directory), so a writer's nested steps do not refuse each other.

The lock file is opened with O_NOFOLLOW: a symbolic link at its name is refused.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from featstore.errors import FeatstoreError

LOCK_FILE = ".featstore.lock"

_held: dict[str, tuple[int, int]] = {}  # realpath of the store -> (fd, depth)
_guard = threading.Lock()


class StoreLockedError(FeatstoreError):
    """Another process is writing the store (exit code 1)."""


def _holder_text(fd: int) -> str:
    try:
        raw = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        info: dict[str, Any] = json.loads(raw) if raw else {}
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info.get("since", 0))))
    return (f"pid {info.get('pid')} on {info.get('host', '?')} "
            f"({info.get('command', '?')}, since {since})")


class StoreLock:
    """Context manager: hold the write lock of store directory `path` (which must exist).

    Not blocking: if another process holds it, StoreLockedError names that process. `what`
    names the directory in messages ("store", or "output directory" for `featstore run`'s
    OUT, which holds the same lock file so that two runners never share one output)."""

    def __init__(self, path: str | os.PathLike, command: str | None = None,
                 what: str = "store"):
        self.path = Path(path)
        self.what = what
        self.command = command or " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:3])
        self.key = os.path.realpath(self.path)

    def acquire(self) -> None:
        with _guard:
            if self.key in _held:
                fd, depth = _held[self.key]
                _held[self.key] = (fd, depth + 1)
                return
            lock_path = self.path / LOCK_FILE
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise FeatstoreError(f"{self.what} {str(self.path)!r}: {LOCK_FILE} is a "
                                         "symbolic link; featstore never follows links in a "
                                         "store; remove it") from None
                if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                    raise FeatstoreError(f"{self.what} {str(self.path)!r} is read-only "
                                         f"({exc.strerror}); it cannot be written") from None
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _holder_text(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise StoreLockedError(
                        f"{self.what} {str(self.path)!r} is being written by {holder}; one "
                        "writer at a time: wait for it to finish (or stop it), then rerun"
                    ) from None
                raise
            info = {"pid": os.getpid(), "host": socket.gethostname(),
                    "command": self.command, "since": time.time()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
            _held[self.key] = (fd, 1)

    def release(self) -> None:
        with _guard:
            fd, depth = _held[self.key]
            if depth > 1:
                _held[self.key] = (fd, depth - 1)
                return
            del _held[self.key]
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holds_lock(path: str | os.PathLike) -> bool:
    """Whether this process holds the write lock of `path`."""
    return os.path.realpath(path) in _held
