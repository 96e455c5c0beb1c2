"""A neighbour bank read in chunks, and FAISS indexes filled from it so that the index holds
the only copy of the bank (`scorers.knn_index` builds every index kind through here).

`BankStream(rows, dim, chunks)`: `chunks()` yields the bank's consecutive float32 (r, dim)
row chunks, a fresh pass per call (the scorers read id/train from HDF5 and normalize each
chunk as it is read; an in-memory array is `BankStream.of(array)`, slices of it).

How each index is filled without a second copy of the bank:

- flat (exact, and HNSW's flat storage): the storage vector is sized once to N x D floats
  (`reserve_flat`: resized to its final size and back to 0, which keeps the capacity), then
  every chunk is `add`ed into it: no reallocation, no (N, D) array besides the index's own.
- IVF (Flat and PQ): k-means is trained on `train_rows` bank rows drawn with
  numpy's default_rng(`seed`) (sorted row numbers, gathered in one pass; freed before the lists
  are filled), then a first pass assigns every row to its list (int64 per row), the lists are
  sized to their final lengths, and a second pass adds each chunk with its assignments
  (`IndexIVF.add_core`): peak = max(training sample, inverted lists + one chunk).
- recall of an approximate index against exact search without a calibration target
  (`exact_knn`): the exact top k of every query over the chunks, merged (FAISS ResultHeap).

Peak memory of a fit is the index plus one chunk (tests/test_bank_memory.py checks it for
exact, IVF-Flat and HNSW).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BankStream:
    """A bank of `rows` x `dim` float32 rows, read as consecutive chunks by `chunks()`."""

    rows: int
    dim: int
    chunks: Callable[[], Iterable[np.ndarray]]

    @classmethod
    def of(cls, bank: np.ndarray, chunk_rows: int | None = None) -> BankStream:
        """An in-memory (N, D) float32 array as a stream of its row slices of `chunk_rows`
        rows (views, no copy; default: one chunk, the whole array)."""
        rows, dim = bank.shape
        step = max(1, int(chunk_rows or rows))

        def chunks() -> Iterator[np.ndarray]:
            for start in range(0, rows, step):
                yield bank[start:start + step]

        return cls(int(rows), int(dim), chunks)

    def checked_chunks(self) -> Iterator[np.ndarray]:
        """The chunks as C-contiguous float32, checked to add up to `rows` x `dim`."""
        seen = 0
        for chunk in self.chunks():
            chunk = np.ascontiguousarray(chunk, dtype=np.float32)
            if chunk.ndim != 2 or chunk.shape[1] != self.dim:
                raise ValueError(f"bank chunk of shape {chunk.shape}, expected (r, {self.dim})")
            seen += chunk.shape[0]
            if seen > self.rows:
                raise ValueError(f"bank stream gave more than its {self.rows} rows")
            if chunk.shape[0]:
                yield chunk
        if seen != self.rows:
            raise ValueError(f"bank stream gave {seen} rows, expected {self.rows}")


def reserve_flat(flat: Any, rows: int) -> None:
    """Size a flat index's storage for `rows` more vectors at once (capacity kept, size 0
    added), so that adding them chunk by chunk never reallocates (a reallocation holds the
    old and the new vector together)."""
    codes = flat.codes
    base = codes.size()
    codes.resize(base + int(rows) * int(flat.code_size))
    codes.resize(base)


def fill_flat(index: Any, flat: Any, stream: BankStream) -> None:
    """Add every chunk of `stream` to `index`, whose flat storage is `flat` (the index
    itself, or HNSW's storage), reserved first."""
    reserve_flat(flat, stream.rows)
    for chunk in stream.checked_chunks():
        index.add(chunk)


def sample_rows(stream: BankStream, count: int, seed: int) -> np.ndarray:
    """`count` bank rows drawn uniformly without replacement with default_rng(seed), in row
    order, float32 (count, D); the whole bank (copied) when count >= rows."""
    count = min(int(count), stream.rows)
    if count >= stream.rows:
        picks = None
    else:
        picks = np.sort(np.random.default_rng(int(seed)).choice(stream.rows, size=count,
                                                                 replace=False))
    out = np.empty((count, stream.dim), dtype=np.float32)
    start = filled = 0
    for chunk in stream.checked_chunks():
        stop = start + chunk.shape[0]
        if picks is None:
            part = chunk
        else:
            lo, hi = np.searchsorted(picks, [start, stop])
            part = chunk[picks[lo:hi] - start]
        out[filled:filled + part.shape[0]] = part
        filled += part.shape[0]
        start = stop
    return out


def fill_ivf(faiss: Any, index: Any, stream: BankStream) -> None:
    """Add the bank to a trained IVF index: assign every row (first pass), size each inverted
    list to its final length, then add every chunk with its assignments (second pass)."""
    assign = np.empty(stream.rows, dtype=np.int64)
    start = 0
    for chunk in stream.checked_chunks():
        stop = start + chunk.shape[0]
        assign[start:stop] = index.quantizer.assign(chunk, 1).ravel()
        start = stop
    counts = np.bincount(assign, minlength=index.nlist)
    invlists = index.invlists
    for list_no in np.flatnonzero(counts):
        size = invlists.list_size(int(list_no))
        invlists.resize(int(list_no), size + int(counts[list_no]))
        invlists.resize(int(list_no), size)
    start = 0
    for chunk in stream.checked_chunks():
        stop = start + chunk.shape[0]
        ids = np.arange(index.ntotal, index.ntotal + chunk.shape[0], dtype=np.int64)
        index.add_core(chunk.shape[0], faiss.swig_ptr(chunk), faiss.swig_ptr(ids),
                       faiss.swig_ptr(np.ascontiguousarray(assign[start:stop])))
        start = stop


def exact_knn(faiss: Any, queries: np.ndarray, stream: BankStream, k: int,
              metric: str) -> np.ndarray:
    """Exact top-k bank row ids (n, k) of `queries` by brute force over the chunks (squared
    L2 ascending, or inner product descending), merged across chunks."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    faiss_metric = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    heap = faiss.ResultHeap(queries.shape[0], k, keep_max=metric == "ip")
    start = 0
    for chunk in stream.checked_chunks():
        kk = min(k, chunk.shape[0])
        dist, ids = faiss.knn(queries, chunk, kk, metric=faiss_metric)
        if kk < k:  # pad: the heap takes k columns; -1 ids never win
            pad = np.inf if metric == "l2" else -np.inf
            dist = np.hstack([dist, np.full((dist.shape[0], k - kk), pad, np.float32)])
            ids = np.hstack([ids, np.full((ids.shape[0], k - kk), -1 - start, np.int64)])
        heap.add_result(np.ascontiguousarray(dist), np.ascontiguousarray(ids + start))
        start += chunk.shape[0]
    heap.finalize()
    return heap.I
