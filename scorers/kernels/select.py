"""Exact percentiles of a streamed float32 array, in memory bounded by one chunk (ReAct's
clip value over all N*D entries of a split).

`exact_percentiles(chunks, ps)` equals `np.percentile(all_values.astype(np.float64), p)`
(numpy's default 'linear' method, the interpolation done in float64 from the two exact order
statistics) for every p, found by a two-pass radix select over the float32 bit patterns:
pass 1 (`high_histogram`) a 65536-bin histogram of the high 16 bits of the order-preserving
keys; pass 2 a histogram of the low 16 bits within the bins that hold the needed ranks. NaN
values are an error. `check_percentile` is the one validation of a percentile parameter.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numba import njit

from featstore.errors import FeatstoreError, UsageError

_HI_BINS = 1 << 16
# pass 2 counts every value branch-free (`_add_low_bins`) when the bins it needs hold more
# than this share of the values, else skips the others by a branch (`_add_low_bins_sparse`);
# the counts are the same either way
BRANCH_FREE_SHARE = 0.05


def check_percentile(scorer_name: str, param: str, value: Any) -> float:
    """A percentile strictly inside (0, 100); UsageError naming the parameter otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise UsageError(
            f"scorer {scorer_name!r}: {param} must be a number in (0, 100) (got {value!r})"
        )
    percentile = float(value)
    if not 0 < percentile < 100:
        raise UsageError(
            f"scorer {scorer_name!r}: {param} must be in (0, 100) (got {value!r})"
        )
    return percentile


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
def _add_low_bins_sparse(values, slot, hist_lo, width):
    """`_add_low_bins` where the needed bins hold few of the values: a branch skips the
    others (predicted well when they are nearly all skipped)."""
    bits = values.view(np.uint32)
    discard = hist_lo.size // width - 1
    for i in range(bits.size):
        key = _sort_key(bits[i])
        s = slot[key >> 16]
        if s != discard:
            hist_lo[s * width + (key & 0xFFFF)] += 1


@njit(cache=True, nogil=True)
def _add_low_bins(values, slot, hist_lo, width):
    """hist_lo[slot[key >> 16] * width + (key & 0xFFFF)] += 1 for every value: the bins that
    hold a needed rank have slots 0, 1, ...; every other bin the last slot, a discard row
    (no branch on the slot: where a needed bin holds a large random share of the values, a
    ReLU feature's zeros, a branch on it mispredicts at every other value)."""
    bits = values.view(np.uint32)
    for i in range(bits.size):
        key = _sort_key(bits[i])
        hist_lo[slot[key >> 16] * width + (key & 0xFFFF)] += 1


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
    slot = np.full(_HI_BINS, len(bins), dtype=np.int64)       # the last row: discarded
    slot[bins] = np.arange(len(bins))
    hist_lo = np.zeros((len(bins) + 1) * _HI_BINS, dtype=np.int64)
    counts = np.diff(np.concatenate(([0], cum_hi)))
    add = _add_low_bins if counts[bins].sum() > BRANCH_FREE_SHARE * n else _add_low_bins_sparse
    for arr in chunks():
        add(_flat_f32(arr), slot, hist_lo, _HI_BINS)
    hist_by_bin = hist_lo[:len(bins) * _HI_BINS].reshape(len(bins), _HI_BINS)
    values: dict[int, float] = {}
    for r in ranks:
        b = rank_bin[r]
        below = int(cum_hi[b - 1]) if b > 0 else 0
        cum_lo = np.cumsum(hist_by_bin[bins.index(b)])
        low = int(np.searchsorted(cum_lo, r - below, side="right"))
        values[r] = _key_value((b << 16) | low)
    return [_lerp(values[lo], values[hi], g) for lo, hi, g in positions]
