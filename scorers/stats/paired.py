"""Paired comparisons on common resamples, and Holm's step-down correction.

``paired_bootstrap_p``: two scorers evaluated on the SAME stratified resamples give paired
values ``t_a(b)``, ``t_b(b)``; with ``d_b = t_a(b) - t_b(b)`` the two-sided p-value of "no
difference" is ``min(1, 2 min((1 + #{d_b <= 0}) / (B + 1), (1 + #{d_b >= 0}) / (B + 1)))``
(the bootstrap percentile test: the smallest two-sided level whose percentile interval of the
difference excludes 0, with the +1 that keeps a Monte-Carlo p-value valid).

``holm``: Holm (1979) adjusted p-values: sort ascending, ``p'_(i) = max_{j <= i} min(1, (m -
j + 1) p_(j))``, returned in the input order.
"""

from __future__ import annotations

import numpy as np


def paired_bootstrap_p(dist_a: np.ndarray, dist_b: np.ndarray) -> float:
    """Two-sided p-value of equal means from paired bootstrap values (B,) of a and b."""
    d = np.asarray(dist_a, dtype=np.float64) - np.asarray(dist_b, dtype=np.float64)
    if d.ndim != 1 or d.size < 1:
        raise ValueError(f"paired bootstrap: expected two (B,) distributions, got {d.shape}")
    b = d.size
    lo = (1.0 + np.count_nonzero(d <= 0.0)) / (b + 1.0)
    hi = (1.0 + np.count_nonzero(d >= 0.0)) / (b + 1.0)
    return float(min(1.0, 2.0 * min(lo, hi)))


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values, same order as the input (NaN entries stay NaN, not counted)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[idx]))
        out[idx] = running
    return out
