"""Percentile and BCa bootstrap intervals from a bootstrap distribution (Efron & Tibshirani
1993, §13.3 and §14.3), computed exactly as ``scipy.stats.bootstrap`` computes them.

- percentile: the ``alpha`` and ``1 - alpha`` quantiles of the distribution, ``alpha = (1 -
  level) / 2``, linear interpolation between order statistics (``np.quantile``'s default,
  the quantile ``scipy.stats.quantile`` uses).
- BCa: the quantiles at ``alpha_1 = Phi(z0 + (z0 + z_a) / (1 - a (z0 + z_a)))`` and
  ``alpha_2`` (the same with ``z_{1-a}``), where ``z0 = Phi^-1((#{t_b < t} + #{t_b <= t}) /
  (2B))`` and the acceleration ``a = sum_j sum_i U_ji^3 / n_j^3 / (6 (sum_j sum_i U_ji^2 /
  n_j^2)^(3/2))`` with the jackknife influence ``U_ji = (n_j - 1) (mean_i t_(j,-i) - t_(j,-i))``
  over every stratum ``j`` (scipy's multi-sample form). When every ``U`` is zero (a statistic
  that no single row moves), ``a = 0`` (scipy would divide 0 by 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import ndtr, ndtri

METHODS = ("percentile", "bca")


def check_level(level: float) -> float:
    """A confidence level in (0, 1); ValueError naming the parameter otherwise."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"confidence level (--ci) must be in (0, 1), got {level}")
    return float(level)


def percentile_interval(dist: np.ndarray, level: float = 0.95) -> np.ndarray:
    """(M, 2) [lo, hi] of each column of ``dist`` (B, M): the percentile interval."""
    d = np.asarray(dist, dtype=np.float64)
    alpha = (1.0 - check_level(level)) / 2.0
    return np.stack([np.quantile(d, alpha, axis=0), np.quantile(d, 1.0 - alpha, axis=0)],
                    axis=-1)


def acceleration(jackknife: Sequence[np.ndarray]) -> np.ndarray:
    """(M,) BCa acceleration from the leave-one-out values of every stratum, (n_j, M) each."""
    num: float | np.ndarray = 0.0
    den: float | np.ndarray = 0.0
    for t in jackknife:
        t = np.asarray(t, dtype=np.float64)
        n = float(t.shape[0])
        u = (n - 1.0) * (t.mean(axis=0) - t)
        num = num + (u ** 3).sum(axis=0) / n ** 3
        den = den + (u ** 2).sum(axis=0) / n ** 2
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = num / (6.0 * den ** 1.5)
    return np.where(den > 0.0, a, 0.0)


def bca_interval(dist: np.ndarray, estimate: np.ndarray, accel: np.ndarray,
                 level: float = 0.95) -> np.ndarray:
    """(M, 2) BCa [lo, hi] of each column of ``dist`` (B, M) around ``estimate`` (M,).

    NaN where the interval is undefined (every resample on one side of the estimate).
    """
    d = np.asarray(dist, dtype=np.float64)
    t = np.asarray(estimate, dtype=np.float64)[None, :]
    b = d.shape[0]
    z0 = ndtri(((d < t).sum(axis=0) + (d <= t).sum(axis=0)) / (2.0 * b))
    alpha = (1.0 - check_level(level)) / 2.0
    z_lo = float(ndtri(alpha))
    out = np.empty((d.shape[1], 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        for side, z in enumerate((z_lo, -z_lo)):
            num = z0 + z
            q = ndtr(z0 + num / (1.0 - accel * num))
            for m in range(d.shape[1]):
                out[m, side] = (np.quantile(d[:, m], q[m]) if np.isfinite(q[m])
                                else np.nan)
    return out
