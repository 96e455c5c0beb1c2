"""CFOOD's fraction of reference points whose own k-NN radius reaches a query (OpenOOD
`cfood_postprocessor.py`): for a query with squared distances d_r to the n reference points,
and each reference point's sorted radii R[r, 0] <= R[r, 1] <= ... <= R[r, J-1] (its squared
distance to its (kpos_j + 1)-th nearest reference point, self at 0),

    count_j = #{r : R[r, j] >= d_r} / n

is non-decreasing in j. `first_fraction_index` returns, per query and per threshold k, the
first j with count_j >= k (J when none): a binary search per reference point (the first j
with R[r, j] >= d_r), a histogram of those, one running sum for every k; O(n log J) per
query instead of O(n J).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def first_fraction_index(dist, radii, ks, out):
    """out[i, t] = first j with #{r: radii[r, j] >= dist[i, r]} / n >= ks[t] (J if
    none)."""
    b, n = dist.shape
    j_num = radii.shape[1]
    hist = np.zeros(j_num + 1, dtype=np.int64)
    for i in range(b):
        hist[:] = 0
        for r in range(n):
            d = dist[i, r]
            lo, hi = 0, j_num
            while lo < hi:
                mid = (lo + hi) // 2
                if radii[r, mid] >= d:
                    hi = mid
                else:
                    lo = mid + 1
            hist[lo] += 1
        for t in range(ks.shape[0]):
            out[i, t] = j_num
        total = 0
        for j in range(j_num):
            total += hist[j]
            for t in range(ks.shape[0]):
                if out[i, t] == j_num and total / n >= ks[t]:
                    out[i, t] = j


def sq_distances(q: np.ndarray, q_sq: np.ndarray, ref: np.ndarray, ref_sq: np.ndarray
                 ) -> np.ndarray:
    """(b, n) float64 ||q_i - ref_r||^2 = |q_i|^2 + |ref_r|^2 - 2 q_i . ref_r (one GEMM)."""
    d = q @ ref.T
    d *= -2.0
    d += q_sq[:, None]
    d += ref_sq[None, :]
    return d
