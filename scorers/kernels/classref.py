"""Class-aware relative feature errors (CARef / CADRef, Ling et al., CVPR 2025): one fused
float64 pass per feature row against the mean feature of its predicted class.

For a row x with predicted class c, class mean m_c and sign vector s = sign(w_c) of the head's
row c (0 where w_cj = 0), with d = x - m_c and n1 = ||x||_1 (clamped to the smallest positive
float64, so an all-zero row gives finite errors):

    rel    = ||m_c - x||_1 / n1                              (CARef's relative error)
    e_pos  = sum_j max(d_j s_j, 0) / n1                      (CADRef's E+)
    e_neg  = sum_j max(-d_j s_j, 0) / n1                     (CADRef's E-)

`class_ref_errors` computes all three in one read of the row (float64 sums in column order).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_TINY = np.finfo(np.float64).tiny


def class_ref_errors(x: np.ndarray, pred: np.ndarray, means: np.ndarray,
                     signs: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rel, e_pos, e_neg), each (N,) float64, for rows `x` (N, D) with predicted classes
    `pred` (N,) against class means `means` (C, D) float64 and head signs `signs` (C, D)
    (None: e_pos and e_neg are not computed and come back as zeros)."""
    n = x.shape[0]
    rel, e_pos, e_neg = np.empty(n), np.zeros(n), np.zeros(n)
    sg = np.zeros((1, 1)) if signs is None else np.ascontiguousarray(signs, dtype=np.float64)
    _rows(np.ascontiguousarray(x), np.asarray(pred, dtype=np.int64),
          np.ascontiguousarray(means, dtype=np.float64), sg, signs is not None,
          rel, e_pos, e_neg)
    return rel, e_pos, e_neg


@njit(cache=True, nogil=True, parallel=False)
def _rows(x, pred, means, signs, with_signs, rel, e_pos, e_neg):
    n, d = x.shape
    for i in prange(n):
        c = pred[i]
        n1 = 0.0
        r = 0.0
        pos = 0.0
        neg = 0.0
        for j in range(d):
            v = np.float64(x[i, j])
            diff = v - means[c, j]
            n1 += abs(v)
            r += abs(diff)
            if with_signs:
                p = diff * signs[c, j]
                if p > 0.0:
                    pos += p
                elif p < 0.0:
                    neg -= p
        if n1 < _TINY:
            n1 = _TINY
        rel[i] = r / n1
        e_pos[i] = pos / n1
        e_neg[i] = neg / n1
