"""Seeded stratified bootstrap resamples, drawn once per split and shared by every method.

Each stratum (a split, or the correctly / wrongly classified rows of the ID split) has its own
random stream, ``numpy.random.Generator(PCG64(SeedSequence([seed, crc32(name)])))``, so a
stratum's resamples depend only on (seed, its name, its row count): the same in ``eval``,
``sweep``, ``compare`` and the report, whichever other splits or methods take part. Resamples
are drawn a block of ``BLOCK`` at a time, ``rng.integers(0, n, (size, n))`` for a stratum of
``n`` rows, and kept as the multiplicity of every row (a bincount), the form the walk
kernels take.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

#: Resamples per block: bounds memory at ``BLOCK * rows * 4`` bytes per stratum.
BLOCK = 100


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
        """The next ``size`` resamples as (size, n) int32 multiplicities."""
        return counts_from_indices(self._rng.integers(0, self.n, (size, self.n)), self.n)


def counts_from_indices(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, n) int32 multiplicities of explicit resample indices ``indices`` (B, n_drawn)."""
    idx = np.asarray(indices, dtype=np.int64)
    flat = (idx + n * np.arange(idx.shape[0])[:, None]).ravel()
    return np.bincount(flat, minlength=idx.shape[0] * n).astype(np.int32).reshape(-1, n)


def blocks(n_boot: int, block: int = BLOCK) -> Iterator[int]:
    """Block sizes summing to ``n_boot``."""
    done = 0
    while done < n_boot:
        size = min(block, n_boot - done)
        yield size
        done += size
