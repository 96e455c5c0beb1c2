"""Top-k selection per row, shared by every kept count of a grid (ASH, SCALE).

`keep_count(D, p) = D - int(np.round(D * p / 100))` (the official ASH code's kept count,
numpy round-half-even; the percentiles that keep at least one of a store's D activations are
`scorers.fitting.topk`). `RowSort` sorts each row of a chunk ONCE (numpy's sort of -h, values
only): the k-th largest value of a row gives its kept set for every k, and the sum of the top
k for every k is a cumulative sum of the sorted values (descending order). The kept sets are
nested, so `band_order` lists each row's kept entries band by band (band e = kept at the e-th
smallest k of a grid but not at the one before; index order within a band), and
`running_energies` accumulates one running sum per row over them (`scorers.kernels.gather`),
reading every setting's energy off it. `plan_chain` decides which kept counts join the
running sum by `scorers.kernels.gather.sparse_pays`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .gather import gather_add, gather_sum, sparse_pays
from .softmax import logsumexp


def keep_count(num_features: int, percentile: float) -> int:
    """k = D - round(D * p / 100), as the official ASH code computes it."""
    return num_features - int(np.round(num_features * percentile / 100.0))


@njit(cache=True, nogil=True)
def band_order(x: np.ndarray, ks: np.ndarray, kth: np.ndarray) -> np.ndarray:
    """(n, ks[-1]) int32: per row, the kept entries of every kept count in `ks` (ascending,
    distinct), grouped by band and in index order within a band: band e = the entries kept at
    ks[e] but not at ks[e - 1], at positions ks[e - 1]..ks[e] - 1, so the first k positions are
    exactly the k kept entries for every k in `ks`. `kth[i, e]` is the ks[e]-th largest value of
    row i; kept at k = the entries above it plus the lowest-index ones equal to it (the first k
    of a stable descending sort; NaN sorts last, as in numpy)."""
    n, d = x.shape
    m = ks.shape[0]
    out = np.empty((n, ks[m - 1]), dtype=np.int32)
    need = np.empty(m, dtype=np.int64)
    taken = np.empty(m, dtype=np.int64)
    pos = np.empty(m, dtype=np.int64)
    for i in range(n):
        valid = 0
        for j in range(d):
            if not np.isnan(x[i, j]):
                valid += 1
        for e in range(m):
            t = kth[i, e]
            if np.isnan(t):
                need[e] = ks[e] - valid          # every valid entry, then NaNs by index
            else:
                above = 0
                for j in range(d):
                    if x[i, j] > t:
                        above += 1
                need[e] = ks[e] - above          # ties at t, by index
            taken[e] = 0
            pos[e] = 0 if e == 0 else ks[e - 1]
        for j in range(d):
            v = x[i, j]
            band = m
            for e in range(m):
                t = kth[i, e]
                if np.isnan(t):
                    member = not np.isnan(v)
                    tie = not member
                else:
                    member = v > t
                    tie = v == t
                if not member and tie and taken[e] < need[e]:
                    member = True
                    taken[e] += 1
                if member and band == m:
                    band = e
            if band < m:
                out[i, pos[band]] = j
                pos[band] += 1
    return out


@njit(cache=True, nogil=True)
def _running_logits(x, order, wt, bias, ends, need_p, need_b, set_end, set_acc, set_scale,
                    out):
    """Per row i: running sums acc_p = sum x[i, j] * wt[j] and acc_b = sum wt[j] over j =
    order[i, 0], order[i, 1], ... (float64, four entries at a time within a band: see
    `scorers.kernels.gather.gather_add`), and at the end of band e (after ends[e] entries) for every
    setting s with set_end[s] == e: out[s, i] = set_scale[s, i] * acc + bias, acc = acc_p if
    set_acc[s] == 0 else acc_b."""
    n = x.shape[0]
    c_num = wt.shape[1]
    acc_p = np.empty(c_num)
    acc_b = np.empty(c_num)
    vals = np.empty(order.shape[1], dtype=np.float64)
    for i in range(n):
        acc_p[:] = 0.0
        acc_b[:] = 0.0
        idx = order[i]
        if need_p:
            for r in range(order.shape[1]):
                vals[r] = np.float64(x[i, idx[r]])
        lo = 0
        for e in range(ends.shape[0]):
            hi = ends[e]
            if need_p:
                gather_add(acc_p, wt, idx, vals, lo, hi)
            if need_b:
                gather_sum(acc_b, wt, idx, lo, hi)
            lo = hi
            for s in range(set_end.shape[0]):
                if set_end[s] != e:
                    continue
                acc = acc_p if set_acc[s] == 0 else acc_b
                scale = set_scale[s, i]
                z = out[s, i]
                for c in range(c_num):
                    z[c] = scale * acc[c] + bias[c]


def running_energies(x: np.ndarray, order: np.ndarray, wt: np.ndarray, bias: np.ndarray,
                     ends: np.ndarray, set_end: np.ndarray, set_acc: np.ndarray,
                     set_scale: np.ndarray) -> np.ndarray:
    """(S, n) energies of the settings read off the running sums (`_running_logits`), in row
    blocks of at most ~32 MB of logits; logsumexp in numpy (vectorized exp)."""
    n, c_num, s_num = x.shape[0], wt.shape[1], set_end.shape[0]
    need_p, need_b = bool((set_acc == 0).any()), bool((set_acc == 1).any())
    block = max(1, (1 << 22) // max(1, s_num * c_num))
    out = np.empty((s_num, n), dtype=np.float64)
    buf = np.empty((s_num, min(block, n), c_num), dtype=np.float64)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        z = buf[:, : hi - lo]
        _running_logits(x[lo:hi], order[lo:hi], wt, bias, ends, need_p, need_b, set_end,
                        set_acc, np.ascontiguousarray(set_scale[:, lo:hi]), z)
        for s in range(s_num):
            out[s, lo:hi] = logsumexp(z[s])
    return out


class RowSort:
    """One descending sort of each row's values per chunk (numpy's vectorized sort of -h),
    shared by every percentile of a grid: s1, the k-th largest value and the top-k sums for
    every k, and (`order`) the kept entries grouped by band."""

    def __init__(self, x: np.ndarray, k_max: int):
        self.x = x
        self.x64 = x.astype(np.float64)
        self.s1 = self.x64.sum(axis=1)
        self.sorted_desc = -np.sort(-x, axis=1)[:, :k_max]      # NaN last
        self._csum: np.ndarray | None = None

    @property
    def csum(self) -> np.ndarray:
        """csum[:, k-1] = sum of the top k, summed in descending order; made on first use."""
        if self._csum is None:
            self._csum = np.cumsum(self.sorted_desc.astype(np.float64), axis=1)
        return self._csum

    def sharpen_ratio(self, k: int) -> np.ndarray:
        """s1 / s2 with s2 the sum of the top k (0 where s2 == 0)."""
        s2 = self.csum[:, k - 1]
        return np.divide(self.s1, s2, out=np.zeros_like(s2), where=s2 != 0)

    def order(self, ks: list[int]) -> np.ndarray:
        """`band_order` for the distinct kept counts `ks`."""
        kv = np.array(sorted(set(ks)), dtype=np.int64)
        kth = np.ascontiguousarray(self.sorted_desc[:, kv - 1])
        return band_order(self.x, kv, kth)


def plan_chain(ks: list[int], d: int) -> set[int]:
    """The kept counts accumulated sparsely in one running sum per row (ascending; each
    increment over the previous one pays by `sparse_pays`); the others are dense."""
    chain: set[int] = set()
    prev = 0
    for k in sorted(set(ks)):
        if sparse_pays((k - prev) / d):
            chain.add(k)
            prev = k
    return chain
