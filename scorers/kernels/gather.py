"""Sparse-product primitives: row gathers of W.T accumulated into float64 sums, and the cost
model that decides between them and a dense BLAS product (ReAct, ASH, DICE).

`sparse_pays(f)`: accumulating a fraction f of a row's D entries one by one costs about
SPARSE_COST * f of a dense float64 product with W.T; sparse is chosen when that is below 1.
The choice depends only on shapes and counts, so scores are deterministic; the two ways
differ only in the order of the float64 sums.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# An entry accumulated row by row (`gather_add`: a row of W.T as float32 streamed from cache
# into a float64 sum) costs about this many times its share (1 / D) of a dense float64 product
# of the chunk with W.T (a streamed add runs at a fraction of dgemm's FMA rate: see
# benchmarks/results/gemm-fits.md); used to choose
# between the sparse and the dense way, a choice that only depends on shapes and counts.
SPARSE_COST = 3.0


def sparse_pays(fraction: float) -> bool:
    """Is accumulating `fraction` * D entries per row cheaper than one dense product?"""
    return SPARSE_COST * fraction < 1.0


def exact_f32(a: np.ndarray) -> np.ndarray:
    """`a` as float32 when that is lossless (a float32 head: half the memory traffic of the
    gathers, and every product with a float32 feature is exact in float64), else float64."""
    a = np.asarray(a)
    if a.dtype == np.float32:
        return np.ascontiguousarray(a)
    f = a.astype(np.float32)
    if np.array_equal(f.astype(a.dtype), a):
        return np.ascontiguousarray(f)
    return np.ascontiguousarray(a, dtype=np.float64)


@njit(cache=True, nogil=True, fastmath={"contract"})
def gather_add(acc: np.ndarray, wt: np.ndarray, idx: np.ndarray, coef: np.ndarray, lo: int,
               hi: int) -> None:
    """acc += sum_{r = lo..hi-1} coef[r] * wt[idx[r]] in float64, four rows of wt per pass over
    acc (summed as ((t1 + t2) + (t3 + t4)), the rest one by one; products may be fused into
    the adds (FMA), which changes nothing when coef and wt are float32 values, as their
    products are exact in float64): the rows of wt stream from cache once per entry while acc
    stays in L1."""
    c_num = acc.shape[0]
    r = lo
    while r + 4 <= hi:
        w1, w2, w3, w4 = wt[idx[r]], wt[idx[r + 1]], wt[idx[r + 2]], wt[idx[r + 3]]
        v1, v2, v3, v4 = coef[r], coef[r + 1], coef[r + 2], coef[r + 3]
        for c in range(c_num):
            acc[c] += ((v1 * np.float64(w1[c]) + v2 * np.float64(w2[c]))
                       + (v3 * np.float64(w3[c]) + v4 * np.float64(w4[c])))
        r += 4
    while r < hi:
        w1, v1 = wt[idx[r]], coef[r]
        for c in range(c_num):
            acc[c] += v1 * np.float64(w1[c])
        r += 1


@njit(cache=True, nogil=True)
def gather_sum(acc: np.ndarray, wt: np.ndarray, idx: np.ndarray, lo: int, hi: int) -> None:
    """acc += sum_{r = lo..hi-1} wt[idx[r]] in float64, four rows per pass (as `gather_add`)."""
    c_num = acc.shape[0]
    r = lo
    while r + 4 <= hi:
        w1, w2, w3, w4 = wt[idx[r]], wt[idx[r + 1]], wt[idx[r + 2]], wt[idx[r + 3]]
        for c in range(c_num):
            acc[c] += ((np.float64(w1[c]) + np.float64(w2[c]))
                       + (np.float64(w3[c]) + np.float64(w4[c])))
        r += 4
    while r < hi:
        w1 = wt[idx[r]]
        for c in range(c_num):
            acc[c] += np.float64(w1[c])
        r += 1


@njit(cache=True, nogil=True, fastmath={"contract"})
def gather_add_sum(acc: np.ndarray, acc_sum: np.ndarray, wt: np.ndarray, idx: np.ndarray,
                   coef: np.ndarray, lo: int, hi: int) -> None:
    """`gather_add(acc, ...)` and `gather_sum(acc_sum, ...)` in one pass over the rows of wt
    (same sums, same order)."""
    c_num = acc.shape[0]
    r = lo
    while r + 4 <= hi:
        w1, w2, w3, w4 = wt[idx[r]], wt[idx[r + 1]], wt[idx[r + 2]], wt[idx[r + 3]]
        v1, v2, v3, v4 = coef[r], coef[r + 1], coef[r + 2], coef[r + 3]
        for c in range(c_num):
            a1, a2, a3, a4 = (np.float64(w1[c]), np.float64(w2[c]), np.float64(w3[c]),
                              np.float64(w4[c]))
            acc[c] += (v1 * a1 + v2 * a2) + (v3 * a3 + v4 * a4)
            acc_sum[c] += (a1 + a2) + (a3 + a4)
        r += 4
    while r < hi:
        w1, v1 = wt[idx[r]], coef[r]
        for c in range(c_num):
            a1 = np.float64(w1[c])
            acc[c] += v1 * a1
            acc_sum[c] += a1
        r += 1
