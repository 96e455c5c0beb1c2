"""ReAct: rectified activations (Sun, Guo, Li, "ReAct: Out-of-distribution Detection With
Rectified Activations", NeurIPS 2021).

Formula as implemented (float64), with h the penultimate feature and (W, b) the head:

    c     = percentile(all N*D entries of the `percentile_split` features, p)   ('linear')
    score = logsumexp(min(h, c) @ W.T + b)                 energy of the clipped features

Higher is more in-distribution. `percentile` p in (0, 100), default 90 (ReAct paper; OpenOOD
v1.5 `configs/postprocessors/react.yml` `percentile: 90`). `percentile_split` (default
"id/train", as in the ReAct paper, which sets c from the ID training activations; OpenOOD v1.5
uses its ID validation loader — pass `percentile_split="id/val"` for that). Default sweep grid:
OpenOOD v1.5 `react.yml` `percentile_list: [85, 90, 95, 99]`.

The threshold is exact and memory-bounded: it equals
`np.percentile(all_entries.astype(np.float64), p)` (numpy's default 'linear' method, the
interpolation done in float64 from the two exact order statistics), found by a two-pass radix
select over the float32 bit patterns (pass 1: a 65536-bin histogram of the high 16 bits of
the order-preserving keys; pass 2: a histogram of the low 16 bits within the bins that hold the
needed ranks). Memory is one chunk plus the histograms, whatever N*D is; NaN features are an
error. All percentiles of a grid come out of the same two passes; clipping is per p, over
chunks of the scored split.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError

from .base import Scorer, logsumexp

_HI_BINS = 1 << 16
_SIGN = np.uint32(0x80000000)


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


def _sort_keys(x: np.ndarray) -> np.ndarray:
    """Order-preserving uint32 keys of float32 values (negative: all bits flipped; else the
    sign bit set), so that key order is float order (-0.0 just below +0.0)."""
    u = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32)
    return np.where(u & _SIGN, ~u, u | _SIGN)


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


def exact_percentiles(chunks: Callable[[], Iterable[np.ndarray]],
                      percentiles: Sequence[float]) -> list[float]:
    """Exact `np.percentile(concat.astype(float64), p)` for every p over the float32 values
    yielded by `chunks()` (called twice), in memory bounded by one chunk."""
    hist_hi = np.zeros(_HI_BINS, dtype=np.int64)
    n = 0
    for arr in chunks():
        a = np.asarray(arr, dtype=np.float32)
        if a.size == 0:
            continue
        if np.isnan(a).any():
            raise FeatstoreError("features contain NaN; a percentile over them is undefined")
        hist_hi += np.bincount(_sort_keys(a) >> 16, minlength=_HI_BINS)
        n += a.size
    if n == 0:
        raise FeatstoreError("no values to take a percentile of (empty split)")
    cum_hi = np.cumsum(hist_hi)
    positions = [_linear_positions(n, p) for p in percentiles]
    ranks = sorted({r for lo, hi, _ in positions for r in (lo, hi)})
    # Which high-16-bit bin holds each needed rank, and how many values lie below that bin.
    rank_bin = {r: int(np.searchsorted(cum_hi, r, side="right")) for r in ranks}
    bins = sorted(set(rank_bin.values()))
    slot = np.full(_HI_BINS, -1, dtype=np.int64)
    slot[bins] = np.arange(len(bins))
    hist_lo = np.zeros(len(bins) * _HI_BINS, dtype=np.int64)
    for arr in chunks():
        a = np.asarray(arr, dtype=np.float32)
        if a.size == 0:
            continue
        keys = _sort_keys(a)
        s = slot[keys >> 16]
        sel = s >= 0
        idx = s[sel] * _HI_BINS + (keys[sel] & 0xFFFF)
        hist_lo += np.bincount(idx, minlength=hist_lo.size)
    hist_lo = hist_lo.reshape(len(bins), _HI_BINS)
    values: dict[int, float] = {}
    for r in ranks:
        b = rank_bin[r]
        below = int(cum_hi[b - 1]) if b > 0 else 0
        cum_lo = np.cumsum(hist_lo[bins.index(b)])
        low = int(np.searchsorted(cum_lo, r - below, side="right"))
        values[r] = _key_value((b << 16) | low)
    return [_lerp(values[lo], values[hi], g) for lo, hi, g in positions]


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
        self.bias = np.asarray(bias, dtype=np.float64)
        self._thresholds: dict[tuple[str, float], float] = {}
        self.threshold = self.thresholds([self.params])[0]

    def thresholds(self, settings: list[dict[str, Any]]) -> list[float]:
        """Clip value per setting; every missing percentile of a split in one radix pass."""
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

            for p, value in zip(ps, exact_percentiles(chunks, ps), strict=True):
                self._thresholds[(split_name, p)] = value
        return [self._thresholds[k] for k in keys]

    def _score(self, split: Any) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        clips = self.thresholds([{**self.params, **s} for s in settings])
        out = [np.empty(split.num_rows, dtype=np.float64) for _ in settings]
        for rows, (x,) in self.chunks(split, "features"):
            x64 = x.astype(np.float64)
            for i, c in enumerate(clips):
                out[i][rows] = logsumexp(np.minimum(x64, c) @ self.weight_t + self.bias)
        return out
