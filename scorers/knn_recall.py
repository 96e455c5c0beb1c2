"""Recall of an approximate neighbour index against exact search, and the calibration of its
search width to a recall target (`scorers.knn_index` calls it).

Recall calibration (`recall_target`, with `recall_queries` and `recall_k`; ivf_flat, ivf_pq
re-ranked, hnsw): the search width (IVF `nprobe`, HNSW `ef_search`) for searches at k is the
smallest width w, found by doubling from the lowest width (nprobe 1; ef_search k) and then
bisecting between the last width below the target and the first at or above it, at which a
one-sided 95% lower confidence bound on recall@k, mean - 1.645 sd / sqrt(n) of the per-query
recalls of the n recall queries against their exact top k (from the index itself: IVF-Flat
scanning every list, nprobe = nlist; HNSW's flat storage; IVF-PQ's re-ranking flat copy), is >=
`recall_target` (the bound, not the mean: with the mean, the smallest passing width is the one
whose sample recall happens to be high, and new queries came out ~0.015 below the target at 20k
x 2048); the widest setting (nprobe = nlist; ef_search = N) ends the doubling. The width is
calibrated for `recall_k` at build (recorded in `options`: `nprobe` / `ef_search`,
`recall_target`; its recall in `recall`) and, the first time another k is searched (a K grid),
for that k: the index build does not depend on k, the width does. The recall is measured on the
queries it was calibrated on (their mean, >= the bound); held-out queries are checked in the
tests and in benchmarks/bench_ann.py and bench_ann_scale.py. Every step is a deterministic
search, so the choice is too. IVF-PQ without re-ranking (`rerank_factor = 0`) ignores the
target (see `check_recall_target`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

from featstore.errors import UsageError

RECALL_CONFIDENCE_Z = 1.645  # one-sided 95% lower bound on the calibrated recall


def query_recalls(approx_idx: np.ndarray, exact_idx: np.ndarray) -> np.ndarray:
    """Per query |approx neighbours ∩ exact neighbours| / k (both (n, k) ids), float64 (n,).

    Ids of -1 (FAISS's "not found") never count as hits."""
    approx_idx = np.asarray(approx_idx)
    exact_idx = np.asarray(exact_idx)
    if approx_idx.shape != exact_idx.shape or approx_idx.ndim != 2:
        raise ValueError(
            f"recall_at_k: expected two (n, k) arrays of the same shape, got "
            f"{approx_idx.shape} and {exact_idx.shape}"
        )
    n, k = exact_idx.shape
    if k == 0:
        return np.ones(n)
    hits = [np.intersect1d(a[a >= 0], e[e >= 0]).size
            for a, e in zip(approx_idx, exact_idx, strict=True)]
    return np.asarray(hits, dtype=np.float64) / k


def recall_at_k(approx_idx: np.ndarray, exact_idx: np.ndarray) -> float:
    """Mean over queries of |approx neighbours ∩ exact neighbours| / k (both (n, k) ids)."""
    per_query = query_recalls(approx_idx, exact_idx)
    return float(per_query.mean()) if per_query.size else 1.0


def recall_lower_bound(per_query: np.ndarray, z: float = RECALL_CONFIDENCE_Z) -> float:
    """mean - z * sd / sqrt(n) of per-query recalls (sd with ddof = 1; 0 for one query): a
    one-sided lower confidence bound on the mean recall of queries like these (z = 1.645:
    95%)."""
    n = per_query.size
    sd = float(per_query.std(ddof=1)) if n > 1 else 0.0
    return float(per_query.mean()) - z * sd / math.sqrt(max(n, 1))


def calibrate_width(recall_of: Callable[[int], float], lo: int, hi: int,
                    target: float) -> tuple[int, float]:
    """(width, recall_of(width)): the smallest width in [lo, hi] reaching `target`, found by
    doubling from `lo` and then bisecting between the last width below the target and the
    first at or above it; (hi, its recall) when even `hi` stays below. Each width is
    evaluated at most once."""
    seen: dict[int, float] = {}

    def at(width: int) -> float:
        if width not in seen:
            seen[width] = recall_of(width)
        return seen[width]

    below, width = lo - 1, lo
    while at(width) < target and width < hi:
        below, width = width, min(2 * width, hi)
    if at(width) < target:
        return width, at(width)
    while width - below > 1:
        mid = (below + width) // 2
        if at(mid) >= target:
            width = mid
        else:
            below = mid
    return width, at(width)


def check_recall_target(recall_target: float | None, kind: str, nprobe: int | None,
                        ef_search: int | None, recall_queries: np.ndarray | None,
                        recall_k: int, rerank_factor: int) -> float | None:
    """`recall_target` as a float in (0, 1], or None: no calibration, also for `exact` (its
    recall is 1) and `ivf_pq` without re-ranking (`rerank_factor = 0`: its distances are
    quantized, so the exact neighbours cannot be recomputed from the index, and its recall is
    bounded by the quantization, not by nprobe).
    UsageError for a value out of range, a target without recall queries, or a target
    together with the width it would choose (nprobe / ef_search)."""
    if recall_target is None:
        return None
    if (isinstance(recall_target, bool) or not isinstance(recall_target, numbers.Real)
            or not 0.0 < float(recall_target) <= 1.0):
        raise UsageError(f"knn index: recall_target={recall_target!r} must satisfy "
                         "0 < recall_target <= 1")
    if kind == "exact" or (kind == "ivf_pq" and rerank_factor == 0):
        return None
    if recall_queries is None or not len(recall_queries) or recall_k < 1:
        raise UsageError("knn index: recall_target needs recall_queries (>= 1 row) and "
                         "recall_k >= 1 to calibrate on")
    width_name, width = ("ef_search", ef_search) if kind == "hnsw" else ("nprobe", nprobe)
    if width is not None:
        raise UsageError(f"knn index: {width_name}={width} and recall_target="
                         f"{recall_target} are exclusive (the target chooses {width_name})")
    return float(recall_target)
