"""AdaSCALE's row kernels (Regmi et al., 2025; OpenOOD v1.5 `adascale_postprocessor.py` and
`networks/adascale_net.py`), float64, arrays in and out.

- `perturbation_stat(h, h', k1, k2, lmbda)`: Q' = sum_{j in top_k1(h)} max(h'_j, 0)
  + lmbda * sum_{j in top_k2(h)} |h_j - h'_j|, top_k(h) the k largest entries of h (ties: the
  lower index first, a stable sort);
- `ecdf_upper(sorted_fit, q)`: 1 - ECDF(q) = 1 - #{fit values <= q} / n (statsmodels' ECDF);
- `adaptive_scales(x, percentiles)`: s = sum_j x_j / sum of the k largest x_j with
  k = D - round(D p / 100) (round half to even, as torch.round), at least 1, per row.
"""

from __future__ import annotations

import numpy as np


def top_indices(h: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of each row's k largest entries (a stable descending sort)."""
    return np.argsort(-h, axis=1, kind="stable")[:, :k]


def perturbation_stat(h: np.ndarray, h_moved: np.ndarray, k1: int, k2: int,
                      lmbda: float) -> np.ndarray:
    """Q' per row (module docstring)."""
    order = top_indices(h, max(k1, k2))
    first = np.take_along_axis(np.maximum(h_moved, 0.0), order[:, :k1], axis=1).sum(axis=1)
    shift = np.take_along_axis(np.abs(h - h_moved), order[:, :k2], axis=1).sum(axis=1)
    return first + lmbda * shift


def ecdf_upper(sorted_fit: np.ndarray, q: np.ndarray) -> np.ndarray:
    """1 - ECDF(q) of the sorted fit values (module docstring)."""
    return 1.0 - np.searchsorted(sorted_fit, q, side="right") / sorted_fit.shape[0]


def sorted_desc_cumsum(x: np.ndarray) -> np.ndarray:
    """(n, D) cumulative sums of each row sorted in descending order (shared by every
    percentile of a grid)."""
    return np.cumsum(-np.sort(-x, axis=1), axis=1)


def adaptive_scales(cumsum: np.ndarray, percentiles: np.ndarray) -> np.ndarray:
    """sum(x) / (sum of the k largest x), k = D - round(D p / 100), at least 1, per row;
    `cumsum` from `sorted_desc_cumsum(x)`."""
    d = cumsum.shape[1]
    k = d - np.rint(d * percentiles / 100.0).astype(np.int64)
    k = np.clip(k, 1, d)
    top = np.take_along_axis(cumsum, (k - 1)[:, None], axis=1)[:, 0]
    return cumsum[:, -1] / top
