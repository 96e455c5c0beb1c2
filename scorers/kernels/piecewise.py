"""Piecewise-constant feature shaping (OptFS, Zhao et al., ICLR 2024): the bin of every
feature entry on a grid of equal-width intervals [b_k, b_k + width), k = 0..K-1, the
per-bin sums of the entries' logit contributions that fit the shaping, and the shaped
features x_j theta_{k(x_j)} that score (0 for an entry in no bin).

An entry's bin is found by arithmetic, k = floor((v - b_0) / width), moved by at most a step
so that b_k <= v (and v < b_{k+1}), then kept only if v < b_k + width: the comparisons the
authors' masks `(x >= b) & (x < b + width)` make, with the bin edges in float64. (Where
b_k + width and b_{k+1} differ by an ulp, an entry between them is in two of the authors'
masks and in one bin here.)
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _bin(v, edges, width):
    k_num = edges.shape[0]
    if not (v >= edges[0]) or not (v < edges[k_num - 1] + width):
        return -1
    k = int((v - edges[0]) * (1.0 / width))      # a first guess (v >= edges[0]: truncation
    k = min(k, k_num - 1)                         # is the floor); the comparisons decide
    while k > 0 and v < edges[k]:
        k -= 1
    while k + 1 < k_num and v >= edges[k + 1]:
        k += 1
    return k if v < edges[k] + width else -1


@njit(cache=True, nogil=True)
def add_bin_contributions(x, pred, weight, edges, width, sums):
    """sums[k] += sum over rows i and entries j in bin k of weight[pred[i], j] * x[i, j]
    (float64, row after row): the numerator of OptFS's I_k."""
    n, d = x.shape
    for i in range(n):
        c = pred[i]
        for j in range(d):
            v = np.float64(x[i, j])
            k = _bin(v, edges, width)
            if k >= 0:
                sums[k] += weight[c, j] * v


@njit(cache=True, nogil=True)
def shape_rows(x, edges, width, theta, out):
    """out[i, j] = x[i, j] * theta[k] for the bin k of x[i, j], 0 where it has none
    (float64)."""
    n, d = x.shape
    for i in range(n):
        for j in range(d):
            v = np.float64(x[i, j])
            k = _bin(v, edges, width)
            out[i, j] = v * theta[k] if k >= 0 else 0.0
