"""ReAct: rectified activations (Sun, Guo, Li, "ReAct: Out-of-distribution Detection With
Rectified Activations", NeurIPS 2021).

Formula as implemented (float64), with h the penultimate feature and (W, b) the head:

    c     = percentile(all N*D entries of the `percentile_split` features, p)   ('linear')
    score = logsumexp(min(h, c) @ W.T + b)                 energy of the clipped features

Higher is more in-distribution. `percentile` p in (0, 100), default 90 (ReAct paper; OpenOOD
v1.5 `configs/postprocessors/react.yml` `percentile: 90`). `percentile_split` (default
"id/train"): the split whose activations set c. Sources, checked in their code: the ReAct
authors' `compute_threshold.py` (deeplearning-wisc/react at 2aa35d9) takes the 90th percentile
of the pooled features of the first ~2000 images of the ImageNet VALIDATION loader, and OpenOOD
v1.5 (`react_postprocessor.py` at 3c35632) the percentile over its whole ID validation loader.
featstore picks id/train: in a store id/val is the split on which sweeps CHOOSE
hyperparameters (DESIGN §4), and fitting c on it as well would let the same rows fit the
statistic and judge the setting; id/train is also present wherever a features scorer can fit.
Pass `percentile_split="id/val"` to reproduce the authors' / OpenOOD's convention. Default
sweep grid: OpenOOD v1.5 `react.yml` `percentile_list: [85, 90, 95, 99]`.

The threshold is exact and memory-bounded: it equals
`np.percentile(all_entries.astype(np.float64), p)` (numpy's default 'linear' method, the
interpolation done in float64 from the two exact order statistics), found by a two-pass radix
select over the float32 bit patterns (pass 1: a 65536-bin histogram of the high 16 bits of
the order-preserving keys; pass 2: a histogram of the low 16 bits within the bins that hold the
needed ranks). Memory is one chunk plus the histograms, whatever N*D is; NaN features are an
error. Fit computes the clip values of `percentile` AND of the default grid in the same two
passes (a few more bins in pass 2), and keeps pass 1's histogram per split, so a sweep over the
default grid reads the fit split no further and any other percentile costs one pass.

Scoring, per block of rows of the scored split (`map_rows`), for the distinct clip values
c_0 < c_1 < ... of a grid:

    logits(c_0) = min(h, c_0) @ W.T + b                    dense (float64 BLAS), as one setting
    logits(c_t) = logits(c_0) + sum_{b < t} Y_b + (c_t - c_0) * sum_{b >= t} U_b,   t >= 1
    Y_b = sum_{j in band b} (h_j - c_0) W[:, j],   U_b = sum_{j in band b} W[:, j]

with band b of a row = its entries in (c_b, c_{b+1}] (the last band: above the largest c):
min(h_j, c_t) - c_0 is h_j - c_0 in the bands below t and c_t - c_0 in the others. Only the
entries above c_0 are touched (e.g. ~15% for the default grid's 85th percentile), row by row
in float64 with W held as float32 (exact for a float32 head) (`_clip_band_logits`). Where that
does not pay by the cost model of `sparse_pays` (e.g. a low percentile whose c_0 leaves most
entries above it), the lowest clip values are dense products too and the band sums start from
a higher anchor (`plan_anchor`, from the block's counts; deterministic); the two ways differ
only in the order of the float64 sums.

From the stored logits: when the store's float32 logits are the head's output
(`scorers.base.stored_logits_are_head`: x @ W.T + b to 1e-4 of the largest logit on a probe of
256 rows; false for float16 splits, TF32/float16 heads or logits of another head), a setting
whose clip value leaves few entries above it on the split that set it (`logits_pay`:
(1 - p/100) * SPARSE_COST < 1, i.e. p > 66.7; decided per setting, never from the scored rows)
is computed without a product, as

    logits(c) = l - sum_{j: h_j > c} (h_j - c) W[:, j]          (l the stored logits)

in one descending pass over the bands above the lowest such clip value (`_clip_from_logits`,
float64 sums, W as float32). Its scores carry the float32 rounding of the stored logits (~1e-7
relative; a test bounds them at 1e-6 against the float64 formula); the same setting gives
the same scores alone or in any grid (1e-15 apart).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numba import njit

from featstore.errors import FeatstoreError, UsageError

from ..base import Scorer, head_logits_usable, logsumexp, stored_logits_are_head

# An entry accumulated row by row (`gather_add`: a row of W.T as float32 streamed from cache
# into a float64 sum) costs about this many times its share (1 / D) of a dense float64 product
# of the chunk with W.T (measured ~2.2-3x: ~8-10 G adds/s against ~25 GFMA/s for OpenBLAS
# dgemm on one core of an AMD EPYC, more under other jobs' cache pressure); used to choose
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


_HI_BINS = 1 << 16


def check_percentile(scorer_name: str, param: str, value: Any) -> float:
    """A percentile strictly inside (0, 100); UsageError naming the parameter otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise UsageError(
            f"scorer {scorer_name!r}: {param} must be a number in (0, 100) (got {value!r})"
        )
    if not 0 < value < 100:
        raise UsageError(
            f"scorer {scorer_name!r}: {param} must be in (0, 100) (got {value!r})"
        )
    return float(value)


def _flat_f32(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).reshape(-1)


@njit(cache=True, nogil=True)
def _sort_key(u):
    """Order-preserving uint32 key of a float32's bits `u` (negative: all bits flipped; else
    the sign bit set), so that key order is float order (-0.0 just below +0.0); int64."""
    u = np.int64(u)
    return (u ^ 0xFFFFFFFF) if u >= 0x80000000 else (u | 0x80000000)


@njit(cache=True, nogil=True)
def _add_high_bins(values, hist):
    """hist[key >> 16] += 1 for every float32 of `values`; False if one is NaN."""
    bits = values.view(np.uint32)
    for i in range(bits.size):
        if (np.int64(bits[i]) & 0x7FFFFFFF) > 0x7F800000:
            return False
        hist[_sort_key(bits[i]) >> 16] += 1
    return True


@njit(cache=True, nogil=True)
def _add_low_bins(values, slot, hist_lo, width):
    """For the values whose high 16 key bits have a slot s >= 0: hist_lo[s * width + (key &
    0xFFFF)] += 1."""
    bits = values.view(np.uint32)
    for i in range(bits.size):
        key = _sort_key(bits[i])
        s = slot[key >> 16]
        if s >= 0:
            hist_lo[s * width + (key & 0xFFFF)] += 1


def _key_value(key: int) -> float:
    u = key ^ 0x80000000 if key & 0x80000000 else (~key) & 0xFFFFFFFF
    return float(np.array([u], dtype=np.uint32).view(np.float32)[0])


def _linear_positions(n: int, p: float) -> tuple[int, int, float]:
    """numpy's 'linear' method: previous/next ranks and gamma for the p-th percentile of n."""
    q = float(np.true_divide(p, 100))
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return n - 1, n - 1, 0.0
    lo = math.floor(virtual)
    return lo, lo + 1, virtual - lo


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's `_lerp` in float64 (the form switches at t >= 0.5, as numpy does)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def high_histogram(chunks: Callable[[], Iterable[np.ndarray]]) -> np.ndarray:
    """Pass 1 of `exact_percentiles`: the cumulative 65536-bin histogram of the high 16 bits
    of the sort keys (its last entry is the number of values)."""
    hist_hi = np.zeros(_HI_BINS, dtype=np.int64)
    for arr in chunks():
        if not _add_high_bins(_flat_f32(arr), hist_hi):
            raise FeatstoreError("features contain NaN; a percentile over them is undefined")
    return np.cumsum(hist_hi)


def exact_percentiles(chunks: Callable[[], Iterable[np.ndarray]],
                      percentiles: Sequence[float],
                      cum_hi: np.ndarray | None = None) -> list[float]:
    """Exact `np.percentile(concat.astype(float64), p)` for every p over the float32 values
    yielded by `chunks()` (called twice, or once when pass 1's `high_histogram` of the same
    values is given as `cum_hi`), in memory bounded by one chunk."""
    if cum_hi is None:
        cum_hi = high_histogram(chunks)
    n = int(cum_hi[-1])
    if n == 0:
        raise FeatstoreError("no values to take a percentile of (empty split)")
    positions = [_linear_positions(n, p) for p in percentiles]
    ranks = sorted({r for lo, hi, _ in positions for r in (lo, hi)})
    # Which high-16-bit bin holds each needed rank, and how many values lie below that bin.
    rank_bin = {r: int(np.searchsorted(cum_hi, r, side="right")) for r in ranks}
    bins = sorted(set(rank_bin.values()))
    slot = np.full(_HI_BINS, -1, dtype=np.int64)
    slot[bins] = np.arange(len(bins))
    hist_lo = np.zeros(len(bins) * _HI_BINS, dtype=np.int64)
    for arr in chunks():
        _add_low_bins(_flat_f32(arr), slot, hist_lo, _HI_BINS)
    hist_lo = hist_lo.reshape(len(bins), _HI_BINS)
    values: dict[int, float] = {}
    for r in ranks:
        b = rank_bin[r]
        below = int(cum_hi[b - 1]) if b > 0 else 0
        cum_lo = np.cumsum(hist_lo[bins.index(b)])
        low = int(np.searchsorted(cum_lo, r - below, side="right"))
        values[r] = _key_value((b << 16) | low)
    return [_lerp(values[lo], values[hi], g) for lo, hi, g in positions]


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
def _clip_band_logits(x, anchor, wt, cs, out):
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
def _clip_from_logits(x, top, wt, cs, out):
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


def logits_pay(percentile: float) -> bool:
    """Is a setting cheaper from the stored logits than as a dense product, by `sparse_pays`
    for the fraction of entries above its clip value on the split that set it (1 - p/100)?
    Decided per setting, never from the scored rows, so that a row's score does not depend
    on the rows scored with it."""
    return sparse_pays(1.0 - float(percentile) / 100.0)


def plan_anchor(counts: Sequence[int], size: int) -> int:
    """Index a of the anchor threshold (ascending thresholds; counts[t] = entries of the block
    above threshold t, `size` = all entries): thresholds below a and a itself are dense
    products, the ones above come from `_clip_band_logits`, which touches (counts[a] -
    counts[-1]) + counts[a + 1] entries; the cheapest a by the cost model of
    `scorers.methods.ash.sparse_pays` (first of ties)."""
    t_num = len(counts)
    best, best_cost = t_num - 1, float(t_num)
    for a in range(t_num - 1):
        touched = counts[a] - counts[-1] + counts[a + 1]
        cost = a + 1 + SPARSE_COST * touched / max(size, 1)
        if cost < best_cost:
            best, best_cost = a, cost
    return best


class ReAct(Scorer):

    name = "react"
    needs = ("features", "head", "fit:id/train")
    defaults = {"percentile": 90, "percentile_split": "id/train"}
    grid = {"percentile": [85, 90, 95, 99]}
    paper = ("Sun, Guo, Li. ReAct: Out-of-distribution Detection With Rectified Activations. "
             "NeurIPS 2021")

    def check_params(self, params: dict[str, Any], store: Any = None) -> None:
        check_percentile(self.name, "percentile", params["percentile"])
        split = params["percentile_split"]
        if not isinstance(split, str):
            raise UsageError(
                f"scorer {self.name!r}: percentile_split must be a split name (got {split!r})"
            )
        if store is not None and not store.has_split(split):
            avail = ", ".join(store.splits()) or "none"
            raise UsageError(
                f"scorer {self.name!r}: percentile_split {split!r} is not a split of store "
                f"{str(store.path)!r} (available: {avail})"
            )

    def _fit(self, store: Any) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.wt = exact_f32(np.asarray(weight).T)        # (D, C), for the sparse sums
        self.bias = np.asarray(bias, dtype=np.float64)
        self.logits_are_head = stored_logits_are_head(store)
        self._thresholds: dict[tuple[str, float], float] = {}
        self._cum_hi: dict[str, np.ndarray] = {}
        # The default grid's clip values come out of the same two passes (a few more bins of
        # pass 2's histogram): a sweep over the default grid reads id/train no further.
        own = float(self.params["percentile"])
        extra = [{**self.params, "percentile": p} for p in self.grid["percentile"]
                 if float(p) != own]
        self.threshold = self.thresholds([self.params, *extra])[0]

    def thresholds(self, settings: list[dict[str, Any]]) -> list[float]:
        """Clip value per setting; every missing percentile of a split from one pass over it
        (pass 1's histogram of each split is kept, so later percentiles cost one pass)."""
        keys = [(s["percentile_split"], float(s["percentile"])) for s in settings]
        missing: dict[str, list[float]] = {}
        for split_name, p in keys:
            if (split_name, p) not in self._thresholds:
                missing.setdefault(split_name, [])
                if p not in missing[split_name]:
                    missing[split_name].append(p)
        for split_name, ps in missing.items():
            split = self.fit_split(self.store, split_name)

            def chunks(split: Any = split) -> Iterable[np.ndarray]:
                return (x for _, (x,) in self.chunks(split, "features"))

            if split_name not in self._cum_hi:
                self._cum_hi[split_name] = high_histogram(chunks)
            values = exact_percentiles(chunks, ps, self._cum_hi[split_name])
            for p, value in zip(ps, values, strict=True):
                self._thresholds[(split_name, p)] = value
        return [self._thresholds[k] for k in keys]

    def _score(self, split: Any) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        clips = self.thresholds(full)
        cs = sorted(set(clips))
        if head_logits_usable(split, self.logits_are_head):
            from_logits = {c for c, s in zip(clips, full, strict=True)
                           if logits_pay(s["percentile"])}

            def block_l(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
                energy = self._energies(x, cs, logits, from_logits)
                return [energy[c] for c in clips]

            return self.map_rows(split, ("features", "logits"), block_l, outputs=len(settings))

        def block(x: np.ndarray) -> list[np.ndarray]:
            energy = self._energies(x, cs)
            return [energy[c] for c in clips]

        return self.map_rows(split, ("features",), block, outputs=len(settings))

    def _dense(self, x64: np.ndarray, c: float) -> np.ndarray:
        z = np.minimum(x64, c) @ self.weight_t
        z += self.bias
        return z

    def _energies(self, x: np.ndarray, cs: list[float], logits: np.ndarray | None = None,
                  from_logits: set[float] | None = None) -> dict[float, np.ndarray]:
        """Energy of every clip value in `cs` (ascending) for one block of rows: those in
        `from_logits` from the stored logits (`_clip_from_logits`); the others as dense
        products up to the anchor chosen by `plan_anchor` (from the block's counts), the rest
        from `_clip_band_logits` (the block is widened to float64 only for those)."""
        energy: dict[float, np.ndarray] = {}
        if logits is not None and from_logits:
            low = [c for c in cs if c in from_logits]
            z = np.empty((len(low), x.shape[0], self.wt.shape[1]), dtype=np.float64)
            _clip_from_logits(x, np.asarray(logits, dtype=np.float64), self.wt,
                              np.array(low, dtype=np.float64), z)
            for t, c in enumerate(low):
                energy[c] = logsumexp(z[t])
            cs = [c for c in cs if c not in from_logits]
            if not cs:
                return energy
        x64 = x.astype(np.float64)
        if len(cs) == 1:
            energy[cs[0]] = logsumexp(self._dense(x64, cs[0]))
            return energy
        counts = [int(np.count_nonzero(x64 > c)) for c in cs]
        a = plan_anchor(counts, x64.size)
        energy.update({c: logsumexp(self._dense(x64, c)) for c in cs[:a]})
        rest = np.array(cs[a:], dtype=np.float64)
        n, c_num = x.shape[0], self.wt.shape[1]
        block = max(1, (1 << 22) // max(1, (len(rest) - 1) * c_num))
        for c in rest:
            energy[float(c)] = np.empty(n, dtype=np.float64)
        for lo in range(0, n, block):
            hi = min(lo + block, n)
            anchor = self._dense(x64[lo:hi], rest[0])
            energy[float(rest[0])][lo:hi] = logsumexp(anchor)
            if len(rest) > 1:
                z = np.empty((len(rest) - 1, hi - lo, c_num), dtype=np.float64)
                _clip_band_logits(x[lo:hi], anchor, self.wt, rest, z)
                for t in range(1, len(rest)):
                    energy[float(rest[t])][lo:hi] = logsumexp(z[t - 1])
        return energy
