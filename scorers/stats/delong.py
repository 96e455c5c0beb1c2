"""DeLong's test for two or more correlated AUROCs on the same rows (DeLong, DeLong &
Clarke-Pearson 1988), by the fast algorithm of Sun & Xu (2014, IEEE SPL 21(11)): midranks
instead of the O(m n) comparison matrix, O(N log N) per scorer.

As implemented, for ``k`` scorers on ``m`` positive (ID) and ``n`` negative (OOD) rows (higher
score = more ID): with ``T^z`` the midranks of the ``m + n`` pooled scores, ``T^x`` those of
the positives among themselves and ``T^y`` of the negatives among themselves,

- ``AUC = (sum_i T^z_i - m (m + 1) / 2) / (m n)`` over the positives (ties count one half);
- the structural components ``V10_i = (T^z_i - T^x_i) / n`` (positives) and ``V01_j = 1 -
  (T^z_j - T^y_j) / m`` (negatives);
- ``S = S10 / m + S01 / n``, with ``S10`` and ``S01`` the (k x k) sample covariances (ddof 1)
  of the V10 and V01 rows;
- for scorers ``a`` and ``b``: ``z = (AUC_a - AUC_b) / sqrt(S_aa + S_bb - 2 S_ab)``, two-sided
  ``p = 2 (1 - Phi(|z|))``. A zero variance (identical rankings) gives ``z = 0``, ``p = 1``
  when the AUROCs are equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm, rankdata


@dataclass(frozen=True)
class DeLongResult:
    """AUROCs (fractions), their covariance, and the test of the first two."""

    aucs: np.ndarray      # (k,)
    cov: np.ndarray       # (k, k)
    z: float
    p_value: float


def delong_covariance(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(aucs (k,), covariance (k, k)) of ``k`` scorers: ``pos`` (k, m), ``neg`` (k, n)."""
    x = np.atleast_2d(np.asarray(pos, dtype=np.float64))
    y = np.atleast_2d(np.asarray(neg, dtype=np.float64))
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"DeLong: {x.shape[0]} scorers on the positives but {y.shape[0]} on "
                         "the negatives")
    m, n = x.shape[1], y.shape[1]
    if m < 2 or n < 2:
        raise ValueError(f"DeLong needs at least 2 positive and 2 negative rows, got {m} and "
                         f"{n}")
    tz = rankdata(np.concatenate([x, y], axis=1), axis=1)
    tx = rankdata(x, axis=1)
    ty = rankdata(y, axis=1)
    aucs = (tz[:, :m].sum(axis=1) - m * (m + 1) / 2.0) / (m * n)
    v10 = (tz[:, :m] - tx) / n
    v01 = 1.0 - (tz[:, m:] - ty) / m
    cov = np.atleast_2d(np.cov(v10)) / m + np.atleast_2d(np.cov(v01)) / n
    return aucs, cov


def delong_test(pos_a: np.ndarray, neg_a: np.ndarray, pos_b: np.ndarray,
                neg_b: np.ndarray) -> DeLongResult:
    """DeLong's test of AUROC(a) = AUROC(b), scorers a and b on the same rows."""
    if np.shape(pos_a) != np.shape(pos_b) or np.shape(neg_a) != np.shape(neg_b):
        raise ValueError("DeLong: both scorers must score the same rows (shapes differ)")
    aucs, cov = delong_covariance(np.stack([pos_a, pos_b]), np.stack([neg_a, neg_b]))
    var = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
    diff = aucs[0] - aucs[1]
    if var <= 1e-300:
        z = 0.0 if diff == 0.0 else float(np.sign(diff) * np.inf)
    else:
        z = float(diff / np.sqrt(var))
    return DeLongResult(aucs, cov, z, float(2.0 * norm.sf(abs(z))))
