"""AdaSCALE's row kernels (Regmi, 2025; OpenOOD v1.5 `adascale_postprocessor.py` and
`networks/adascale_net.py`), float64, arrays in and out.

- `top_mask(h, k)`: each row's k largest entries of h as a mask (ties at the k-th value: the
  lower index first, as a stable descending sort), by one `np.partition` per row, O(D);
- `perturbation_stat(h, h', k1, k2, lmbda)`: Q' = sum_{j in top_k1(h)} max(h'_j, 0)
  + lmbda * sum_{j in top_k2(h)} |h_j - h'_j|;
- `ecdf_upper(sorted_fit, q)`: 1 - ECDF(q) = 1 - #{fit values <= q} / n (statsmodels' ECDF);
- `top_cumsum(x, m)`: the cumulative sums of each row's m largest entries in descending order
  (a partition at m, then a sort of those m only), shared by every percentile of a grid;
- `adaptive_scales(total, cumsum, percentiles)`: s = sum_j x_j / (sum of the k largest x_j),
  k = D - round(D p / 100) (round half to even, as torch.round), at least 1, per row.
"""

from __future__ import annotations

import numpy as np


def top_mask(h: np.ndarray, k: int) -> np.ndarray:
    """(n, D) bool: each row's k largest entries (module docstring)."""
    if k <= 0:
        return np.zeros(h.shape, dtype=bool)
    k = min(k, h.shape[1])
    kth = -np.partition(-h, k - 1, axis=1)[:, k - 1]
    above = h > kth[:, None]
    tied = h == kth[:, None]
    need = k - above.sum(axis=1)
    return above | (tied & (np.cumsum(tied, axis=1) <= need[:, None]))


def perturbation_stat(h: np.ndarray, h_moved: np.ndarray, k1: int, k2: int,
                      lmbda: float) -> np.ndarray:
    """Q' per row (module docstring)."""
    first = np.where(top_mask(h, k1), np.maximum(h_moved, 0.0), 0.0).sum(axis=1)
    shift = np.where(top_mask(h, k2), np.abs(h - h_moved), 0.0).sum(axis=1)
    return first + lmbda * shift


def ecdf_upper(sorted_fit: np.ndarray, q: np.ndarray) -> np.ndarray:
    """1 - ECDF(q) of the sorted fit values (module docstring)."""
    return 1.0 - np.searchsorted(sorted_fit, q, side="right") / sorted_fit.shape[0]


def top_cumsum(x: np.ndarray, m: int) -> np.ndarray:
    """(n, m) cumulative sums of each row's m largest entries, descending (module docstring)."""
    m = max(1, min(m, x.shape[1]))
    top = -np.partition(-x, m - 1, axis=1)[:, :m] if m < x.shape[1] else x
    return np.cumsum(-np.sort(-top, axis=1), axis=1)


def kept_counts(dim: int, percentiles: np.ndarray) -> np.ndarray:
    """k = D - round(D p / 100), clipped to [1, D] (module docstring)."""
    return np.clip(dim - np.rint(dim * percentiles / 100.0).astype(np.int64), 1, dim)


def adaptive_scales(total: np.ndarray, cumsum: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """sum(x) / (sum of the k largest x) per row; `cumsum` from `top_cumsum(x, m)` with
    m >= every k of `counts` (from `kept_counts`)."""
    return total / np.take_along_axis(cumsum, (counts - 1)[:, None], axis=1)[:, 0]
