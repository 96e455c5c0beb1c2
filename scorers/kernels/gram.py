"""Gram sums of streamed row chunks, sum_chunks x^T x (D x D, float64), for the covariances of
ViM / Residual and MDS / RMDS (their id/train passes: `scorers.fitting.principal`,
`scorers.fitting.classstats`).

`GramSum.add(x)` is one BLAS dsyrk per chunk, C <- x^T x + C, into the upper triangle of a
single Fortran-order matrix: no per-chunk D x D product matrix and no separate addition of it.
With the read chunks of `scorers.rowmap` the NumPy form `acc += x.T @ x` costs more than
dsyrk (`benchmarks.bench_factorizations.gram_sums` measures both). The sum is float64
whatever the scorer's `precision` (`scorers.kernels.precision` says why).
Deterministic: the same chunks give the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg.blas import dsyrk


class GramSum:
    """Accumulates x^T x over float64 row chunks x (n, D); `matrix(count)`: sum / count."""

    def __init__(self, dim: int):
        self.upper = np.zeros((dim, dim), order="F")  # the upper triangle is the sum so far

    def add(self, x: np.ndarray) -> None:
        """C += x^T x for a float64 chunk (n, D) (C-contiguous: x.T is then the
        Fortran-order D x n operand dsyrk reads without a copy)."""
        if x.shape[0] == 0:
            return
        x = np.ascontiguousarray(x, dtype=np.float64)
        self.upper = dsyrk(1.0, x.T, beta=1.0, c=self.upper, trans=0, lower=0,
                           overwrite_c=1)

    def matrix(self, count: float = 1.0) -> np.ndarray:
        """The symmetric D x D sum divided by `count` (C order), made in place from the
        accumulator (which it consumes: call it once, after the last `add`): the upper
        triangle divided and mirrored (`_mirror_upper`), no D x D temporary."""
        upper = self.upper
        upper /= count
        _mirror_upper(upper)
        return upper.T  # symmetric: the transpose of the Fortran array is C-contiguous

    def upper_matrix(self, count: float = 1.0) -> np.ndarray:
        """The sum divided by `count` as the Fortran-order accumulator itself, of which only
        the UPPER triangle holds the matrix (the lower one is left as it is): for LAPACK
        routines that read one triangle (`kernels.subspace.eigh_upper`), with no mirroring
        and no copy. Consumes the accumulator, as `matrix` does."""
        self.upper /= count
        return self.upper


@njit(cache=True, nogil=True)
def _mirror_upper(a):
    """a[i, j] = a[j, i] for i > j, in place."""
    for j in range(a.shape[1]):
        for i in range(j + 1, a.shape[0]):
            a[i, j] = a[j, i]
