"""Seeded stratified bootstrap resamples, drawn once per split and shared by every method.

Each stratum (a split, or the correctly / wrongly classified rows of the ID split) has its own
random stream, ``numpy.random.Generator(PCG64(SeedSequence([seed, crc32(name)])))``, so a
stratum's resamples depend only on (seed, its name, its row count): the same in ``eval``,
``sweep``, ``compare`` and the report, whichever other splits or methods take part. Resamples
are drawn ``BLOCK`` at a time, ``rng.integers(0, n, (size, n))`` for a stratum of ``n`` rows
(processed in batches of whole ``BLOCK``s), and kept as the multiplicity of every row (a
bincount), the form the walk kernels take.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

#: Resamples per random draw (the unit that fixes the streams).
BLOCK = 100
#: Row visits per processing batch: a batch holds ``BLOCK * k`` resamples with ``k`` the
#: largest that keeps ``resamples * rows`` under this (memory: 4 bytes each per stratum).
BATCH_ROWS = 1 << 22


def stratum_rng(seed: int, name: str) -> np.random.Generator:
    """The random stream of stratum ``name`` under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), zlib.crc32(name.encode("utf-8"))])))


class Stratum:
    """The resamples of one stratum of ``n`` rows, produced block by block in a fixed order."""

    def __init__(self, name: str, n: int, seed: int):
        if n < 1:
            raise ValueError(f"stratum {name!r}: no rows to resample")
        self.name = name
        self.n = int(n)
        self._rng = stratum_rng(seed, name)

    def counts(self, size: int) -> np.ndarray:
        """The next ``size`` resamples as (size, n) int32 multiplicities, drawn in chunks of
        ``BLOCK`` (so a batch of ``k * BLOCK`` resamples draws what ``k`` batches draw)."""
        parts = [counts_from_indices(self._rng.integers(0, self.n, (min(BLOCK, size - s),
                                                                    self.n)), self.n)
                 for s in range(0, size, BLOCK)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def counts_from_indices(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, n) int32 multiplicities of explicit resample indices ``indices`` (B, n_drawn)."""
    idx = np.asarray(indices, dtype=np.int64)
    flat = (idx + n * np.arange(idx.shape[0])[:, None]).ravel()
    return np.bincount(flat, minlength=idx.shape[0] * n).astype(np.int32).reshape(-1, n)


def batch_size(max_rows: int) -> int:
    """Resamples per processing batch for strata of at most ``max_rows`` rows."""
    return BLOCK * max(1, BATCH_ROWS // (BLOCK * max(1, max_rows)))


def blocks(n_boot: int, block: int = BLOCK) -> Iterator[int]:
    """Batch sizes summing to ``n_boot`` (multiples of ``BLOCK`` but the last)."""
    done = 0
    while done < n_boot:
        size = min(block, n_boot - done)
        yield size
        done += size
