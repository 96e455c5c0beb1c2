"""Band sums: sums over a row's entries (or a class's weights) grouped into the bands between
consecutive thresholds, so that every setting of a grid is read off one pass of running sums.

Clip bands (ReAct). For clip values c_0 < c_1 < ... and band b of a row = its entries in
(c_b, c_{b+1}] (the last band: above the largest c),

    min(h, c_t) @ W.T + b = anchor + sum_{b < t} Y_b + (c_t - c_0) sum_{b >= t} U_b
                          = top - sum_{b >= t} (Y_b - (c_t - c_0) U_b)
    Y_b = sum_{j in band b} (h_j - c_0) W[:, j],   U_b = sum_{j in band b} W[:, j]

with anchor = min(h, c_0) @ W.T + b (`clip_band_logits`, ascending pass) or top = h @ W.T + b
(`clip_from_logits`, descending pass), per row in float64, W as float32 rows of W.T.
`plan_anchor` picks the anchor by the cost model of `scorers.kernels.gather.sparse_pays`.

Weight bands (DICE). For nested masks of the head (thresholds decreasing), band e of class c
= the weights kept from setting e on; `WeightBands` lists them per class in band order (CSR)
and `masked_running_sums` accumulates h @ (W * M_e).T band by band for every e.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from .gather import SPARSE_COST, gather_add, gather_add_sum, gather_sum


@njit(cache=True, nogil=True)
def _band_scratch(d, t_num, c_num):
    """Scratch of the band kernels: two (C,) float64 sums, count and start (T + 1,), band and
    entries (D,) int64, coef (D,) float64 (see `_row_bands`)."""
    return (np.empty(c_num), np.empty(c_num), np.empty(t_num + 1, dtype=np.int64),
            np.empty(t_num + 1, dtype=np.int64), np.empty(d, dtype=np.int64),
            np.empty(d, dtype=np.int64), np.empty(d, dtype=np.float64))


@njit(cache=True, nogil=True)
def _row_bands(row, cs, count, start, band, entries, coef):
    """One row's entries grouped by band (cs ascending; band b = cs[b] < v <= cs[b + 1], the
    last band v > cs[-1], b = -1 at or below cs[0]): count[b + 1] entries of band b from
    entries[start[b + 1]] on (index order within a band), and coef[q] = row[entries[q]] - cs[0]
    for the entries above cs[0] (q >= start[1]), float64. `band` is scratch."""
    d = row.shape[0]
    t_num = cs.shape[0]
    count[:] = 0
    for j in range(d):
        v = row[j]
        b = -1
        while b + 1 < t_num and v > cs[b + 1]:
            b += 1
        band[j] = b
        count[b + 1] += 1
    start[0] = 0
    for b in range(t_num):
        start[b + 1] = start[b] + count[b]
    for j in range(d):                           # place, then shift start back below
        b = band[j]
        entries[start[b + 1]] = j
        start[b + 1] += 1
    for b in range(t_num + 1):
        start[b] -= count[b]
    c0 = cs[0]
    for q in range(start[1], d):
        coef[q] = np.float64(row[entries[q]]) - c0


@njit(cache=True, nogil=True)
def clip_band_logits(x, anchor, wt, cs, out):
    """Logits at the thresholds cs[1:] from the anchor logits at cs[0] (cs ascending, distinct;
    anchor = min(x, cs[0]) @ W.T + b), touching only the entries above cs[0]. Band b of a row
    = its entries with cs[b] < x <= cs[b + 1] (b = T-1: x > cs[T-1]); for t >= 1

        min(x, c_t) @ W.T + b = anchor + sum_{b < t} Y_b + (c_t - c_0) sum_{b >= t} U_b,
        Y_b = sum_{j in band b} (x_j - c_0) W[:, j],   U_b = sum_{j in band b} W[:, j],

    per row in float64, in one ascending pass over the bands (Y_b for b <= T-2, U_b for b >= 1,
    both from one pass over a band's rows of W.T where both are needed; the U suffix sums as
    the total minus the prefix). out[t - 1, i] receives the logits of row i at cs[t]."""
    n, d = x.shape
    c_num = wt.shape[1]
    t_num = cs.shape[0]
    acc_y, acc_u, count, start, band, entries, coef = _band_scratch(d, t_num, c_num)
    c0 = cs[0]
    for i in range(n):
        _row_bands(x[i], cs, count, start, band, entries, coef)
        # one ascending pass over the bands: acc_y = sum_{b < t} Y_b and acc_u = sum_{1 <= b < t}
        # U_b when setting t is written (anchor + acc_y - (c_t - c_0) acc_u); after the last
        # band acc_u = sum_{b >= 1} U_b is added back times (c_t - c_0)
        acc_y[:] = 0.0
        acc_u[:] = 0.0
        a = anchor[i]
        for b in range(t_num):
            lo, hi = start[b + 1], start[b + 1] + count[b + 1]
            if b == 0:
                gather_add(acc_y, wt, entries, coef, lo, hi)
            elif b == t_num - 1:
                gather_sum(acc_u, wt, entries, lo, hi)
            else:
                gather_add_sum(acc_y, acc_u, wt, entries, coef, lo, hi)
            if b + 1 < t_num:
                step = cs[b + 1] - c0
                z = out[b, i]
                for c in range(c_num):
                    z[c] = a[c] + acc_y[c] - step * acc_u[c]
        for t in range(1, t_num):
            step = cs[t] - c0
            z = out[t - 1, i]
            for c in range(c_num):
                z[c] += step * acc_u[c]


@njit(cache=True, nogil=True)
def clip_from_logits(x, top, wt, cs, out):
    """Logits at every threshold of cs (ascending, distinct) from the unclipped logits `top`
    (= x @ W.T + b, the stored ones), touching only the entries above cs[0]. With band b of a
    row = its entries with cs[b] < x <= cs[b + 1] (b = T-1: x > cs[T-1]),

        min(x, c_t) @ W.T + b = top - sum_{b >= t} (Y_b - (c_t - c_0) U_b),
        Y_b = sum_{j in band b} (x_j - c_0) W[:, j],   U_b = sum_{j in band b} W[:, j],

    per row in float64 (W as float32 rows of wt, exact), in one descending pass over the
    bands (running sums of Y_b and U_b). out[t, i] receives the logits of row i at cs[t]."""
    n, d = x.shape
    c_num = wt.shape[1]
    t_num = cs.shape[0]
    acc_y, acc_u, count, start, band, entries, coef = _band_scratch(d, t_num, c_num)
    c0 = cs[0]
    for i in range(n):
        _row_bands(x[i], cs, count, start, band, entries, coef)
        acc_y[:] = 0.0
        acc_u[:] = 0.0
        a = top[i]
        for t in range(t_num - 1, -1, -1):
            gather_add_sum(acc_y, acc_u, wt, entries, coef, start[t + 1],
                           start[t + 1] + count[t + 1])
            step = cs[t] - c0
            z = out[t, i]
            for c in range(c_num):
                z[c] = a[c] - (acc_y[c] - step * acc_u[c])


def plan_anchor(counts: Sequence[int], size: int) -> int:
    """Index a of the anchor threshold (ascending thresholds; counts[t] = entries of the block
    above threshold t, `size` = all entries): thresholds below a and a itself are dense
    products, the ones above come from `clip_band_logits`, which touches (counts[a] -
    counts[-1]) + counts[a + 1] entries; the cheapest a by the cost model of
    `scorers.kernels.gather.sparse_pays` (first of ties)."""
    t_num = len(counts)
    best, best_cost = t_num - 1, float(t_num)
    for a in range(t_num - 1):
        touched = counts[a] - counts[-1] + counts[a + 1]
        cost = a + 1 + SPARSE_COST * touched / max(size, 1)
        if cost < best_cost:
            best, best_cost = a, cost
    return best


@njit(cache=True, nogil=True)
def masked_running_sums(xt, indptr, ends, idx, wv, out):
    """out[e, c, :] = sum over the kept weights of class c in bands 0..e of wv[q] * xt[idx[q]]
    (entries indptr[c]..indptr[c+1] in band order, band e ending at ends[c, e]), float64."""
    c_num = indptr.shape[0] - 1
    e_num = ends.shape[1]
    acc = np.empty(xt.shape[1])
    for c in range(c_num):
        acc[:] = 0.0
        lo = indptr[c]
        for e in range(e_num):
            hi = ends[c, e]
            gather_add(acc, xt, idx, wv, lo, hi)
            lo = hi
            out[e, c, :] = acc


@njit(cache=True, nogil=True)
def _band_csr(contrib, weight, thresholds):
    """Per class, the weights kept by a chain of settings (thresholds decreasing), in band
    order (band e = kept from setting e on: the first e with contrib > thresholds[e]) and
    index order within a band: (indptr (C+1,), ends (C, E) = end of band e of class c,
    idx (nnz,) column, wv (nnz,) weight as float64)."""
    c_num, d = contrib.shape
    e_num = thresholds.shape[0]
    per_band = np.zeros((c_num, e_num), dtype=np.int64)
    for c in range(c_num):
        for j in range(d):
            v = contrib[c, j]
            for e in range(e_num):
                if v > thresholds[e]:
                    per_band[c, e] += 1
                    break
    indptr = np.zeros(c_num + 1, dtype=np.int64)
    ends = np.empty((c_num, e_num), dtype=np.int64)
    pos = np.empty(e_num, dtype=np.int64)
    for c in range(c_num):
        run = indptr[c]
        for e in range(e_num):
            pos[e] = run
            run += per_band[c, e]
            ends[c, e] = run
        indptr[c + 1] = run
    idx = np.empty(indptr[c_num], dtype=np.int64)
    wv = np.empty(indptr[c_num], dtype=np.float64)
    for c in range(c_num):
        for e in range(e_num):
            pos[e] = ends[c, e] - per_band[c, e]
        for j in range(d):
            v = contrib[c, j]
            for e in range(e_num):
                if v > thresholds[e]:
                    idx[pos[e]] = j
                    wv[pos[e]] = np.float64(weight[c, j])
                    pos[e] += 1
                    break
    return indptr, ends, idx, wv


class WeightBands:
    """Per class, the kept weights of a chain of settings in band order (CSR)."""

    def __init__(self, weight: np.ndarray, contrib: np.ndarray, thresholds: list[float]):
        self.indptr, self.ends, self.idx, self.wv = _band_csr(
            contrib, weight, np.asarray(thresholds, dtype=np.float64))
