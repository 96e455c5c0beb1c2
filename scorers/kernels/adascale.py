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


def descending_order(h: np.ndarray) -> np.ndarray:
    """(n, D) column indices of each row in descending order of h (a stable sort: ties keep
    the lower index first); shared by Q' and the scale (max(h, 0) keeps h's order)."""
    return np.argsort(-h, axis=1, kind="stable")


def perturbation_stat(h: np.ndarray, h_moved: np.ndarray, order: np.ndarray, k1: int, k2: int,
                      lmbda: float) -> np.ndarray:
    """Q' per row (module docstring); `order` = descending_order(h)."""
    first = np.take_along_axis(np.maximum(h_moved, 0.0), order[:, :k1], axis=1).sum(axis=1)
    shift = np.take_along_axis(np.abs(h - h_moved), order[:, :k2], axis=1).sum(axis=1)
    return first + lmbda * shift


def ecdf_upper(sorted_fit: np.ndarray, q: np.ndarray) -> np.ndarray:
    """1 - ECDF(q) of the sorted fit values (module docstring)."""
    return 1.0 - np.searchsorted(sorted_fit, q, side="right") / sorted_fit.shape[0]


def sorted_desc_cumsum(h: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(n, D) cumulative sums of max(h, 0) in descending order (`order` = descending_order(h));
    shared by every percentile of a grid."""
    return np.cumsum(np.maximum(np.take_along_axis(h, order, axis=1), 0.0), axis=1)


def adaptive_scales(cumsum: np.ndarray, percentiles: np.ndarray) -> np.ndarray:
    """sum(x) / (sum of the k largest x), k = D - round(D p / 100), at least 1, per row;
    `cumsum` from `sorted_desc_cumsum(x)`."""
    d = cumsum.shape[1]
    k = d - np.rint(d * percentiles / 100.0).astype(np.int64)
    k = np.clip(k, 1, d)
    top = np.take_along_axis(cumsum, (k - 1)[:, None], axis=1)[:, 0]
    return cumsum[:, -1] / top
