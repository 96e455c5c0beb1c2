"""Exact one-dimensional 2-means (Numba): the best cut of the sorted values.

In one dimension the optimal 2-means partition is a cut of the sorted values; `_best_cut`
maximises S_k^2/k + (T - S_k)^2/(n - k) over cuts between two different values (equivalently
minimises the within-cluster sum of squares), so the GLOBAL optimum is found exactly."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _best_cut(xs: np.ndarray, n: int) -> int:
    """Exact 1-D 2-means on ascending xs[:n]: the size of the low cluster (0: no cut).

    Maximises S_k^2/k + (T - S_k)^2/(n - k) (equivalently minimises the within-cluster sum of
    squares) over cuts between two different values."""
    total = 0.0
    for j in range(n):
        total += xs[j]
    best = -1.0
    best_k = 0
    s = 0.0
    for k in range(1, n):
        s += xs[k - 1]
        if xs[k - 1] == xs[k]:
            continue
        r = total - s
        v = s * s / k + r * r / (n - k)
        if v > best:
            best = v
            best_k = k
    return best_k


@njit(cache=True)
def _kmeans_rows(X: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per row: [mu_lo, sd_lo, n_lo, mu_hi, sd_hi, n_hi] of the optimal 2-means partition."""
    m = X.shape[0]
    out = np.zeros((m, 6))
    for i in range(m):
        ni = n[i]
        xs = np.sort(X[i, :ni])
        mean = xs.mean()
        k = _best_cut(xs - mean, ni)
        if k == 0:  # constant row: one cluster (IND) with every sample, an empty one
            out[i, 0] = mean
            out[i, 3] = mean
            out[i, 4] = xs.std()
            out[i, 5] = ni
            continue
        lo = xs[:k]
        hi = xs[k:]
        out[i, 0] = lo.mean()
        out[i, 1] = lo.std()
        out[i, 2] = k
        out[i, 3] = hi.mean()
        out[i, 4] = hi.std()
        out[i, 5] = ni - k
    return out
