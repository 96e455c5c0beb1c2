"""The passes over a store's id/train rows that fit the class statistics of several methods
(the arithmetic per chunk is `scorers.kernels.classstats`):

    m     = (1/N) sum_x x                                  `train_mean` (DICE, fDBD, NCI)
    mu_k  = mean of the rows labelled k                    `fit_gaussian_stats` (MDS, RMDS)
    Sigma = (1/N) sum_x (x - mu_y)(x - mu_y)^T             (tied, within-class)
    Sigma0 = (1/N) sum_x (x - m)(x - m)^T                  (global, RMDS)

all float64, summed chunk after chunk in row order. With `normalize` (Mahalanobis++ /
RMDS++: `mds_pp`, `rmds_pp`) every row x is replaced by x / ||x||_2 before any of them
(`unit_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import StoreLike

from ..base import Scorer
from ..kernels.classstats import Scatter, add_class_sums, add_column_sums
from ..kernels.gram import GramSum
from ..kernels.rowfeat import l2_normalize_rows
from ..rowmap import read_chunk_rows

FIT_SPLIT = "id/train"


def train_mean(scorer: Scorer, store: StoreLike, split_name: str = FIT_SPLIT) -> np.ndarray:
    """Mean feature of a split: float64 column sums per chunk (`add_column_sums`), added
    chunk after chunk, divided by the row count."""
    split = scorer.fit_split(store, split_name)
    total = None
    n = 0
    for _, (x,) in scorer.chunks(split, "features"):
        s = np.zeros(x.shape[1])
        add_column_sums(x, s)
        total = s if total is None else total + s
        n += x.shape[0]
    if n == 0 or total is None:
        raise FeatstoreError(f"scorer {scorer.name!r}: split {split_name!r} has no rows to fit")
    return total / n


def unit_rows(feats: np.ndarray) -> np.ndarray:
    """x / ||x||_2 per row, float64 (`kernels.rowfeat.l2_normalize_rows`: the norm in
    float64, an all-zero row stays 0)."""
    out = np.empty(feats.shape, dtype=np.float64)
    l2_normalize_rows(feats, out)
    return out


@dataclass
class GaussianStats:
    """Class means (of the classes present), their ids, the global mean, and the (1/N)
    tied within-class covariance (rows x - mu_y) and global covariance (rows x - m) of the
    labelled id/train rows (`global_cov` is None when not requested: `mds` does not use it)."""

    classes: np.ndarray        # (C',) class ids with >= 1 row
    means: np.ndarray          # (C', D) float64
    global_mean: np.ndarray    # (D,) float64
    within_cov: Scatter
    global_cov: Scatter | None


def fit_gaussian_stats(store: StoreLike, chunk_rows: int, scorer_name: str,
                       with_global: bool = True, field: str = "features",
                       normalize: bool = False) -> GaussianStats:
    """Two streaming passes over id/train (features, labels) in float64. The global
    covariance (one more N x D x D product in pass 2) only when `with_global`. With fewer
    labelled rows than dimensions (N < D) pass 2 keeps the centered rows instead of summing
    D x D scatter matrices (`Scatter`). `normalize`: the statistics of the L2-normalized
    rows (`unit_rows`), as Mahalanobis++ fits them. float64 whatever the scorer's `precision`
    (`kernels.precision` says why). `field`: the rows' field (`extra:<name>`: a layer view)."""
    split = store.split(FIT_SPLIT)
    chunk_rows = read_chunk_rows(split, (field,), chunk_rows)
    num_classes = int(split.dims["logits"]) if "logits" in split.dims else \
        int(store.head[0].shape[0])  # C without reading the head (a store may have none)
    dim = (split.dims["features"] if field == "features"
           else int(split.extra(field.removeprefix("extra:")).shape[1]))
    sums = np.zeros((num_classes, dim))
    counts = np.zeros(num_classes, dtype=np.int64)
    for _, (feats, labels) in split.iter_chunks(field, "labels", chunk_rows=chunk_rows):
        # skips labels outside [0, C)
        add_class_sums(sums, counts, unit_rows(feats) if normalize else feats, labels)
    total = int(counts.sum())
    if total == 0:
        raise FeatstoreError(
            f"scorer {scorer_name!r}: split {FIT_SPLIT!r} has no labelled rows (labels in "
            f"[0, {num_classes})); class statistics need labels"
        )
    present = np.flatnonzero(counts)
    all_means = np.zeros((num_classes, dim))
    all_means[present] = sums[present] / counts[present, None]
    global_mean = sums.sum(axis=0) / total
    as_rows = total < dim
    within_parts: list[np.ndarray] = []
    global_parts: list[np.ndarray] = []
    within = None if as_rows else GramSum(dim)
    glob = None if as_rows or not with_global else GramSum(dim)
    for _, (feats, labels) in split.iter_chunks(field, "labels", chunk_rows=chunk_rows):
        keep = (labels >= 0) & (labels < num_classes)
        x = unit_rows(feats[keep]) if normalize else feats[keep].astype(np.float64)
        g = x - global_mean if with_global else None
        d = x
        d -= all_means[labels[keep]]
        if as_rows:
            within_parts.append(d)
            if g is not None:
                global_parts.append(g)
            continue
        assert within is not None
        within.add(d)
        if glob is not None and g is not None:
            glob.add(g)
    if as_rows:
        within_s = Scatter(total, rows=np.concatenate(within_parts), source=FIT_SPLIT)
        global_s = (Scatter(total, rows=np.concatenate(global_parts), source=FIT_SPLIT)
                    if with_global else None)
    else:
        assert within is not None
        within_s = Scatter(total, matrix=within.matrix(total), source=FIT_SPLIT)
        global_s = (None if glob is None
                    else Scatter(total, matrix=glob.matrix(total), source=FIT_SPLIT))
    return GaussianStats(classes=present, means=all_means[present], global_mean=global_mean,
                         within_cov=within_s, global_cov=global_s)
