"""Row-parallel, cache-sized evaluation of a per-row function over a split's fields.

`map_rows(split, fields, fn)` computes `out[r] = fn(*blocks)[r - start]` for every row r of a
split, where the blocks are consecutive row ranges of the named fields. It is the scoring
loop of every scorer whose score of a row depends on that row alone (all of them once
fitted, except the neighbour searches, which batch their own queries).

How it is fast, and why the numbers do not depend on it:

- Reads: the split is read in row chunks of about `READ_BYTES` per field with
  `read_direct` into one reused buffer per field (no fresh allocation, hence no page faults, per
  chunk); float16 fields are widened to float32 per block.
- Compute: each chunk is cut into blocks of about `BLOCK_BYTES` of input (the temporaries
  of a block, e.g. its float64 copy, stay in the L2 cache and in the allocator's free
  lists), and the blocks run on a thread pool of `threads()` workers (NumPy, BLAS and FAISS
  release the GIL). BLAS runs single-threaded inside the pool (threadpoolctl) so the two
  levels of parallelism do not fight (the thread policy of fits and of work outside the pool
  is `scorers.threads`).
- Determinism: block boundaries are a function of the row index, the field widths and the
  caller's `chunk_rows` only, never of the thread count or timing; every block's result is
  written to its own rows. The same store and parameters give the same scores bit for bit.
- Memory: one read chunk per field plus one block's temporaries per worker. The read
  buffers go back to a small pool when a call ends (`_ReadBuffers`, at most
  `POOL_BYTES` in all) and the next call takes them from there: a process that scores split
  after split touches fresh memory for its read buffers once, not once per split (every
  fresh page is a page fault).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike

from .threads import THREADS_ENV as THREADS_ENV  # re-exported (benchmarks)
from .threads import blas_controller, worker_threads

READ_BYTES = 8 << 20
FIT_READ_BYTES = 4 << 20
BLOCK_BYTES = 1 << 20
POOL_BYTES = 4 * READ_BYTES


class _ReadBuffers:
    """Raw byte buffers kept between `map_rows` calls (thread-safe): `take` hands out a kept
    one at least as large as asked (the smallest such) or a new one; `give` keeps it while
    the kept ones stay within `POOL_BYTES` (the largest kept first), else drops it. Values
    are never carried over: every byte of a buffer a caller uses is read into first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if dtype.hasobject:  # never reinterpret bytes as Python objects
            return np.empty(shape, dtype=dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self._lock:
            fits = [b for b in self._kept if b.nbytes >= nbytes]
            raw = min(fits, key=lambda b: b.nbytes) if fits else None
            if raw is not None:  # by identity (== on arrays compares values)
                self._kept = [b for b in self._kept if b is not raw]
        if raw is None:
            raw = np.empty(max(nbytes, 1), dtype=np.uint8)
        return raw[:nbytes].view(dtype).reshape(shape)

    def give(self, arr: np.ndarray) -> None:
        raw = arr.base if arr.base is not None else arr
        while isinstance(raw, np.ndarray) and raw.base is not None:
            raw = raw.base
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.nbytes > self.limit:
            return
        with self._lock:
            kept = sorted([*self._kept, raw], key=lambda b: -b.nbytes)
            self._kept, total = [], 0
            for b in kept:
                if total + b.nbytes <= self.limit:
                    self._kept.append(b)
                    total += b.nbytes


_READ_BUFFERS = _ReadBuffers(POOL_BYTES)


def threads() -> int:
    """Worker threads of the pool: $FEATSTORE_THREADS if set (>= 1), else the CPUs this process
    may use (`scorers.threads.worker_threads`)."""
    return worker_threads()


def _row_bytes(split: SplitLike, field: str) -> int:
    if field.startswith("extra:"):  # any row axis: bytes per row of the whole array
        ds = split.extra(field[len("extra:"):])
        return max(1, ds.size * ds.dtype.itemsize // max(1, split.num_rows))
    ds = split.dataset(field)
    per_row = int(np.prod(ds.shape[1:], dtype=np.int64)) if ds.ndim > 1 else 1
    return max(1, per_row * ds.dtype.itemsize)


def block_layout(split: SplitLike, fields: Sequence[str], chunk_rows: int | None = None
                 ) -> tuple[int, int]:
    """(rows per block, rows per read chunk) for these fields: blocks of about BLOCK_BYTES of
    the widest field, chunks of about READ_BYTES, a whole number of blocks per chunk.
    `chunk_rows` (a scorer's setting) caps both."""
    widest = max(_row_bytes(split, f) for f in fields)
    block = max(1, BLOCK_BYTES // widest)
    chunk = max(block, (READ_BYTES // widest) // block * block)
    if chunk_rows is not None:
        chunk = min(chunk, max(1, int(chunk_rows)))
        block = min(block, chunk)
    return block, chunk


def read_chunk_rows(split: SplitLike, fields: Sequence[str], chunk_rows: int | None = None) -> int:
    """Rows per streamed read of `fields` in the fit passes and neighbour searches: about
    FIT_READ_BYTES of the widest field (their float64 temporaries are several times that),
    at most `chunk_rows`."""
    widest = max(_row_bytes(split, f) for f in (fields or ("features",)))
    rows = max(1, FIT_READ_BYTES // widest)
    return rows if chunk_rows is None else max(1, min(rows, int(chunk_rows)))


def map_rows(
    split: SplitLike,
    fields: Sequence[str],
    fn: Callable[..., np.ndarray],
    *,
    chunk_rows: int | None = None,
    outputs: int | None = None,
) -> Any:
    """fn applied to consecutive row blocks of `fields` (float32 arrays; see the module
    docstring): an (N,) float64 array, or with `outputs=k` a list of k of them, where fn
    returns a sequence of k (rows,) arrays per block. fn must treat rows independently and
    must not modify its inputs."""
    n = split.num_rows
    out = [np.empty(n, dtype=np.float64) for _ in range(outputs or 1)]
    if n == 0:
        return out if outputs is not None else out[0]
    block, chunk = block_layout(split, fields, chunk_rows)
    datasets = [split.dataset(f) for f in fields]
    buffers = [_READ_BUFFERS.take((min(chunk, n), *ds.shape[1:]), ds.dtype) for ds in datasets]
    try:
        return _map_chunks(split, datasets, buffers, fn, out, block, chunk, outputs)
    finally:
        for buf in buffers:
            _READ_BUFFERS.give(buf)


def _map_chunks(split: SplitLike, datasets: list[Any], buffers: list[np.ndarray],
                fn: Callable[..., np.ndarray], out: list[np.ndarray], block: int, chunk: int,
                outputs: int | None) -> Any:
    """map_rows' loop: read a chunk into the buffers, run its blocks on the pool."""
    n = split.num_rows
    workers = threads()

    def run(bufs: list[np.ndarray], lo: int, hi: int, start: int) -> None:
        args = []
        for buf in bufs:
            part = buf[lo - start:hi - start]
            args.append(part.astype(np.float32) if part.dtype.kind == "f"
                        and part.dtype != np.float32 else part)
        result = fn(*args)
        if outputs is None:
            out[0][lo:hi] = result
        else:
            for dest, values in zip(out, result, strict=True):
                dest[lo:hi] = values

    def read(start: int, stop: int) -> list[np.ndarray]:
        bufs = []
        for ds, whole in zip(datasets, buffers, strict=True):
            buf = whole[: stop - start]
            split.read_into(ds, start, stop, buf)
            bufs.append(buf)
        return bufs

    with blas_controller().limit(limits=1, user_api="blas"):
        if n <= block:  # one block: no pool to start and hand it to (same block, same result)
            run(read(0, n), 0, n, 0)
            return out if outputs is not None else out[0]
        # Reads run alone (h5py serializes HDF5 calls, and overlapping them with the workers
        # was measured slower), then the chunk's blocks run on the pool.
        with ThreadPoolExecutor(workers) as pool:
            for start in range(0, n, chunk):
                stop = min(start + chunk, n)
                bufs = read(start, stop)
                jobs = [pool.submit(run, bufs, lo, min(lo + block, stop), start)
                        for lo in range(start, stop, block)]
                for job in jobs:
                    job.result()
    return out if outputs is not None else out[0]
