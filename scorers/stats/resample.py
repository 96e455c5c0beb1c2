"""Seeded stratified bootstrap resamples, drawn once per split and shared by every method.

Each stratum (a split, or the correctly / wrongly classified rows of the ID split) has its own
random stream, ``numpy.random.Generator(PCG64(SeedSequence([seed, crc32(name)])))``, so a
stratum's resamples depend only on (seed, its name, its row count): the same in ``eval``,
``sweep``, ``compare`` and the report, whichever other splits or methods take part. Resamples
are drawn ``BLOCK`` at a time, ``rng.integers(0, n, (size, n))`` for a stratum of ``n`` rows
(processed in batches of whole ``BLOCK``s), and kept as the multiplicity of every row: either
(resamples, n) int32 (``counts``), or in the walk kernels' lane layout (``lanes``: (chunks, n,
``LANES``), resample ``b`` in chunk ``b // LANES``, lane ``b % LANES``; uint8, widened to
int32 in the (practically impossible) case of a row drawn more than 255 times).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np
from numba import njit

from .walk import LANES

#: Resamples per random draw (the unit that fixes the streams).
BLOCK = 100
#: Bytes of lane-layout multiplicities per stratum and batch: a batch holds ``BLOCK * k``
#: resamples with ``k`` the largest that keeps ``resamples * rows`` under this.
BATCH_BYTES = 1 << 26


def stratum_rng(seed: int, name: str) -> np.random.Generator:
    """The random stream of stratum ``name`` under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), zlib.crc32(name.encode("utf-8"))])))


@njit(cache=True, nogil=True)
def _scatter(idx: np.ndarray, out: np.ndarray, b0: int, cap: int) -> bool:
    """Adds resample ``b0 + b``'s draws ``idx[b]`` to its lane of ``out``; False (and stops)
    when a multiplicity would exceed ``cap``."""
    lanes = out.shape[2]
    for b in range(idx.shape[0]):
        c = (b0 + b) // lanes
        lane = (b0 + b) % lanes
        for i in range(idx.shape[1]):
            r = idx[b, i]
            if out[c, r, lane] >= cap:
                return False
            out[c, r, lane] += 1
    return True


def add_lanes(out: np.ndarray, idx: np.ndarray, b0: int) -> np.ndarray:
    """``out`` (chunks, n, LANES) with resamples ``b0..`` of ``idx`` (B, n_drawn) added;
    a uint8 ``out`` comes back as int32 if a multiplicity would pass 255."""
    if out.dtype == np.uint8 and not _scatter(idx, out, b0, 255):
        for b in range(b0, b0 + idx.shape[0]):
            out[b // LANES, :, b % LANES] = 0
        out = out.astype(np.int32)
        _scatter(idx, out, b0, np.iinfo(np.int32).max)
    elif out.dtype != np.uint8:
        _scatter(idx, out, b0, np.iinfo(np.int32).max)
    return out


def lanes_from_counts(counts: np.ndarray) -> np.ndarray:
    """(chunks, n, LANES) lane layout of (B, n) multiplicities (lanes past B are 0)."""
    c = np.asarray(counts)
    b_n, n = c.shape
    chunks = -(-b_n // LANES)
    dtype = np.uint8 if c.size == 0 or int(c.max()) <= 255 else np.int32
    padded = np.zeros((chunks * LANES, n), dtype=dtype)
    padded[:b_n] = c
    return np.ascontiguousarray(padded.reshape(chunks, LANES, n).transpose(0, 2, 1))


class Stratum:
    """The resamples of one stratum of ``n`` rows, produced block by block in a fixed order."""

    def __init__(self, name: str, n: int, seed: int):
        if n < 1:
            raise ValueError(f"stratum {name!r}: no rows to resample")
        self.name = name
        self.n = int(n)
        self._rng = stratum_rng(seed, name)

    def _draws(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(offset, indices) of the next ``size`` resamples, ``BLOCK`` per draw (so a batch
        of ``k * BLOCK`` resamples draws what ``k`` batches draw)."""
        for s in range(0, size, BLOCK):
            yield s, self._rng.integers(0, self.n, (min(BLOCK, size - s), self.n))

    def counts(self, size: int) -> np.ndarray:
        """The next ``size`` resamples as (size, n) int32 multiplicities."""
        parts = [counts_from_indices(idx, self.n) for _, idx in self._draws(size)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def lanes(self, size: int) -> np.ndarray:
        """The next ``size`` resamples in lane layout, (ceil(size / LANES), n, LANES)."""
        out = np.zeros((-(-size // LANES), self.n, LANES), dtype=np.uint8)
        for s, idx in self._draws(size):
            out = add_lanes(out, idx, s)
        return out


def counts_from_indices(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, n) int32 multiplicities of explicit resample indices ``indices`` (B, n_drawn)."""
    idx = np.asarray(indices, dtype=np.int64)
    flat = (idx + n * np.arange(idx.shape[0])[:, None]).ravel()
    return np.bincount(flat, minlength=idx.shape[0] * n).astype(np.int32).reshape(-1, n)


def batch_size(max_rows: int) -> int:
    """Resamples per processing batch for strata of at most ``max_rows`` rows."""
    return BLOCK * max(1, BATCH_BYTES // (BLOCK * max(1, max_rows)))


def blocks(n_boot: int, block: int = BLOCK) -> Iterator[int]:
    """Batch sizes summing to ``n_boot`` (multiples of ``BLOCK`` but the last)."""
    done = 0
    while done < n_boot:
        size = min(block, n_boot - done)
        yield size
        done += size


@njit(cache=True, nogil=True)
def _lane_totals(c3: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros((c3.shape[0], c3.shape[2]))
    for c in range(c3.shape[0]):
        for r in rows:
            for lane in range(c3.shape[2]):
                out[c, lane] += c3[c, r, lane]
    return out


def lane_totals(c3: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(chunks * LANES,) total multiplicity of ``rows`` in every lane of ``c3``."""
    return _lane_totals(c3, np.ascontiguousarray(rows, dtype=np.int64)).ravel()
