"""The id/train pass of the class-aware reference methods (CARef, CADRef): the mean feature
of the training rows PREDICTED as each class (argmax of the stored logits, first index on
ties), not of their labels: the authors' `utils/get_stat.py` (LingAndZero/CADRef at 121f74b)
groups the training features by `output.argmax(1)`. Optionally, in the same pass, the mean
over all id/train rows of per-row logit statistics (CADRef's global mean logit score), summed
at once from the per-row values (N float64), so that another pass with other chunks gives the
same bits.

    m_k = (1/|P_k|) sum_{x: argmax l(x) = k} x             float64, chunk after chunk

A class that no id/train row is predicted as (the authors' code fails there: the mean of an
empty tensor) takes the mean of all id/train rows, so every predicted class of a scored row
has a reference; `PredictedMeans.empty` lists those classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import StoreLike

from ..base import Scorer
from ..kernels.classstats import add_class_sums

FIT_SPLIT = "id/train"

RowStats = Mapping[str, Callable[[np.ndarray], np.ndarray]]


@dataclass
class PredictedMeans:
    means: np.ndarray                   # (C, D) float64
    counts: np.ndarray                  # (C,) rows predicted as each class
    empty: list[int]                    # classes with no predicted row (global mean used)
    stat_means: dict[str, float] = field(default_factory=dict)


def row_total(parts: list[np.ndarray]) -> float:
    """The float64 sum of per-row values (np.sum of them all at once: the same bits whatever
    the chunks they were computed in)."""
    return float(np.sum(np.concatenate(parts))) if parts else 0.0


def predicted_class_means(scorer: Scorer, store: StoreLike,
                          stats: RowStats | None = None) -> PredictedMeans:
    """One pass over id/train (features, logits): class sums by predicted class
    (`add_class_sums` with the argmax as label), and the float64 mean of every `stats`
    function of a logits chunk (`row_total` of its per-row values)."""
    split = scorer.fit_split(store, FIT_SPLIT)
    c_num = int(split.dims["logits"])
    dim = int(split.dims["features"])
    sums = np.zeros((c_num, dim))
    counts = np.zeros(c_num, dtype=np.int64)
    values: dict[str, list[np.ndarray]] = {key: [] for key in stats or {}}
    for _, (x, logits) in scorer.chunks(split, "features", "logits"):
        add_class_sums(sums, counts, x, np.argmax(logits, axis=1))
        for key, fn in (stats or {}).items():
            values[key].append(fn(logits))
    totals = {key: row_total(parts) for key, parts in values.items()}
    n = int(counts.sum())
    if n == 0:
        raise FeatstoreError(f"scorer {scorer.name!r}: split {FIT_SPLIT!r} has no rows to fit")
    empty = [int(k) for k in np.flatnonzero(counts == 0)]
    means = np.empty_like(sums)
    full = counts > 0
    means[full] = sums[full] / counts[full, None]
    means[~full] = sums.sum(axis=0) / n
    return PredictedMeans(means=means, counts=counts, empty=empty,
                          stat_means={k: v / n for k, v in totals.items()})
