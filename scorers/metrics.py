"""OOD-detection metrics, computed from one sort per split and one Numba walk (no torch).

Conventions (DESIGN.md section 4). Scores are "higher = more in-distribution". Every metric is
returned in percent (0..100). "ID positive" means the ID samples are the positive class and a
sample is accepted as positive when ``score >= t``; "OOD positive" means the OOD samples are the
positive class, ranked by ``-score`` (accepted as OOD when ``score <= t``). The thresholds ``t``
are the distinct score values, so tied scores move together, exactly as in scikit-learn.

Definitions, as implemented (TPR/FPR/precision/recall at each distinct threshold):

- ``auroc``: area under the ROC curve (ID positive), ties counted as one half. Computed exactly
  in integers as ``sum_g n_ood(g) * (2 * n_id(> g) + n_id(g)) / (2 * N_id * N_ood)`` over the
  tie groups ``g``; equals ``sklearn.metrics.roc_auc_score``.
- ``aupr_in``: trapezoid area under the precision-recall curve, ID positive, score as is, with
  the curve's end point (recall 0, precision 1) included; equals
  ``auc(recall, precision)`` of ``precision_recall_curve`` (OpenOOD / pytorch-ood's AUPR-In).
- ``aupr_out``: the same with OOD positive and ``-score`` (AUPR-Out).
- ``ap_in`` / ``ap_out``: step-wise average precision ``sum_k (R_k - R_{k-1}) * P_k`` over the
  thresholds in increasing recall, ID / OOD positive; equals ``average_precision_score``.
- ``fpr95``: the classical FPR at 95% TPR (Hendrycks & Gimpel and most papers): ID positive,
  at the highest threshold that keeps at least 95% of the ID samples (``TPR >= 0.95``), the
  share of OOD samples accepted as ID; equals ``fpr[np.argmax(tpr >= 0.95)]`` of
  ``roc_curve(y_id, score, drop_intermediate=False)``.
- ``fpr95_ood``: OpenOOD v1.5's FPR@95: OOD positive with ``-score``, at the threshold that
  first catches at least 95% of the OOD samples, the share of ID samples rejected as OOD; the
  same formula on ``roc_curve(y_ood, -score, drop_intermediate=False)``. The two are different
  numbers; neither is reported under the other's name.
- ``detection_error``: ``min_t 0.5 * (1 - TPR(t)) + 0.5 * FPR(t)`` (ID positive) over every
  threshold plus both end points ``(TPR, FPR) = (0, 0)`` and ``(1, 1)`` (ODIN, Liang et al.
  2018: the minimum misclassification probability over thresholds).
- ``detection_error_tpr95``: ``0.5 * (1 - TPR(t*)) + 0.5 * FPR(t*)`` at the threshold ``t*``
  of ``fpr95`` (the highest keeping ``TPR >= 0.95``), at the TPR ``t*`` achieves: FACETS'
  "Detection Error" (Recalcati et al., DSAA 2023, §VI Tables VI-VII; the paper gives no
  formula and its cells fit this one). Where ``t*`` keeps exactly 95% of the ID rows it is
  ``2.5 + fpr95 / 2`` in percent (FPR95 86.85 gives 45.925; the paper prints 45.91 for
  InterDataset MSP); where ties make ``t*`` overshoot it is lower (OODL Baseline: 0.37 /
  1.61 at an achieved TPR of 97.15%).

Algorithm: each split is copied to float64 and sorted once (``ndarray.sort``: two sorts of
N/2 values are one merge-sort of the concatenation, at half the cost of an ``argsort`` and
without an index array). One Numba kernel (``scorers.metric_steps.ood_walk``) then merges the
two sorted arrays from the top, grouping equal values across both, and keeps the cumulative
ID/OOD counts at each distinct threshold; every metric above is accumulated from those counts
in the same single pass (the OOD-positive counts at a threshold are the complements of the
ID-positive counts above it) by ``metric_steps.ood_step``, the step the bootstrap applies to
resample multiplicities. Extra memory is the two sorted copies (8 bytes per score); sums use
Neumaier compensation.

Non-finite scores (NaN, +-inf) are an error that names the split and the count; they are
never dropped. Empty splits are an error too.

Also here: ``id_accuracy`` (top-1 in percent over rows with a label other than -1),
``misclassification_auroc`` (FACETS Table VII: AUROC of the score separating correctly
classified ID rows, positive, from misclassified ones), ``shift_sensitivity`` (Pearson
correlation and |OLS slope| of a metric against the shift level index) and
``METRIC_DIRECTIONS`` (whether a higher or a lower value of each metric is better).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from featstore.errors import InputError

from .metric_steps import ood_walk

__all__ = [
    "METRIC_DIRECTIONS",
    "OOD_METRIC_NAMES",
    "id_accuracy",
    "id_accuracy_or_nan",
    "misclassification_auroc",
    "ood_metrics",
    "shift_sensitivity",
]

#: The keys of :func:`ood_metrics`, in the order it returns them.
OOD_METRIC_NAMES: tuple[str, ...] = (
    "auroc",
    "aupr_in",
    "aupr_out",
    "ap_in",
    "ap_out",
    "fpr95",
    "fpr95_ood",
    "detection_error",
    "detection_error_tpr95",
)

#: For hyperparameter selection: "max" if higher is better, "min" if lower is better.
METRIC_DIRECTIONS: dict[str, str] = {
    "auroc": "max",
    "aupr_in": "max",
    "aupr_out": "max",
    "ap_in": "max",
    "ap_out": "max",
    "fpr95": "min",
    "fpr95_ood": "min",
    "detection_error": "min",
    "detection_error_tpr95": "min",
}


# --------------------------------------------------------------------------- Numba kernels


@njit(cache=True, nogil=True)
def _count_nonfinite(x: np.ndarray) -> int:
    n = 0
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            n += 1
    return n


# --------------------------------------------------------------------------- helpers


def _sorted_finite(scores: object, name: str) -> np.ndarray:
    """A sorted float64 copy of ``scores``; InputError (a ValueError, exit 1 on the command
    line) naming ``name`` if empty or non-finite: scores of NaN / inf inputs scored as they are
    (--allow-nonfinite) end here, as one error line, never as a metric."""
    x = np.asarray(scores)
    if x.ndim != 1:
        raise InputError(f"split {name!r}: scores must be 1-D, got shape {x.shape}")
    if x.size == 0:
        raise InputError(f"split {name!r}: no scores (empty array)")
    if x.dtype.kind not in "biuf":
        raise InputError(f"split {name!r}: scores must be numeric, got dtype {x.dtype}")
    x = x.astype(np.float64, copy=True)
    bad = int(_count_nonfinite(x))
    if bad:
        raise InputError(
            f"split {name!r}: {bad} non-finite scores (NaN/inf) of {x.size}; the metrics need "
            "finite scores (NaN / inf inputs scored as they are, --allow-nonfinite, give "
            "NaN scores)"
        )
    x.sort()
    return x


def _walk_percent(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    return 100.0 * ood_walk(pos, neg)


# --------------------------------------------------------------------------- public API


def ood_metrics(
    id_scores: Sequence[float] | np.ndarray,
    ood_scores: Sequence[float] | np.ndarray,
    *,
    id_name: str = "id",
    ood_name: str = "ood",
) -> dict[str, float]:
    """OOD metrics in percent for one ID split against one OOD split.

    Args:
        id_scores: (N_id,) scores of the in-distribution samples, higher = more ID.
        ood_scores: (N_ood,) scores of the OOD samples.
        id_name: the ID split's name, used in error messages.
        ood_name: the OOD split's name, used in error messages.

    Returns:
        ``{"auroc", "aupr_in", "aupr_out", "ap_in", "ap_out", "fpr95", "fpr95_ood",
        "detection_error", "detection_error_tpr95"}`` as floats in percent; definitions in
        the module docstring.

    Raises:
        ValueError: a split is empty, not 1-D, or holds NaN/inf (the message names the split
            and the number of non-finite scores).
    """
    a = _sorted_finite(id_scores, id_name)
    b = _sorted_finite(ood_scores, ood_name)
    vals = _walk_percent(a, b)
    return {k: float(v) for k, v in zip(OOD_METRIC_NAMES, vals, strict=True)}


def _labelled(logits: object, labels: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(logits, labels, mask of labelled rows), validated."""
    lg = np.asarray(logits)
    y = np.asarray(labels)
    if lg.ndim != 2:
        raise ValueError(f"logits must be 2-D (N, C), got shape {lg.shape}")
    if y.ndim != 1 or y.shape[0] != lg.shape[0]:
        raise ValueError(f"labels must have shape ({lg.shape[0]},), got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    mask = y != -1
    bad = mask & ((y < 0) | (y >= lg.shape[1]))
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} labels outside [0, {lg.shape[1]}) and not -1 (unknown)"
        )
    if not mask.any():
        raise ValueError("no labelled rows (every label is -1)")
    return lg, y, mask


def id_accuracy_or_nan(logits: np.ndarray, labels: np.ndarray) -> float:
    """`id_accuracy`, or NaN (JSON null: undefined, never a made-up number) when no row of
    the split is labelled (a store imported without id/test labels)."""
    y = np.asarray(labels)
    if y.ndim == 1 and not (y != -1).any():
        return float("nan")
    return id_accuracy(logits, labels)


def id_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent over the rows whose label is not -1.

    Args:
        logits: (N, C) class logits.
        labels: (N,) int class indices, -1 where unknown (those rows are ignored).

    Raises:
        ValueError: no labelled row, shape mismatch, or a label outside ``[0, C)`` other
            than -1.
    """
    lg, y, mask = _labelled(logits, labels)
    pred = np.argmax(lg[mask], axis=1)
    return float(100.0 * np.mean(pred == y[mask]))


def labelled_correctness(scores: object, logits: object,
                         labels: object) -> tuple[np.ndarray, np.ndarray]:
    """The scores of the labelled rows (label != -1) and, per such row, whether
    ``argmax(logits) == label``.

    Raises:
        ValueError: the scores are not one value per row of the logits (or see `_labelled`).
    """
    lg, y, mask = _labelled(logits, labels)
    s = np.asarray(scores)
    if s.ndim != 1 or s.shape[0] != lg.shape[0]:
        raise ValueError(f"scores must have shape ({lg.shape[0]},), got {s.shape}")
    return s[mask], np.argmax(lg[mask], axis=1) == y[mask]


def misclassification_auroc(
    scores: np.ndarray, logits: np.ndarray, labels: np.ndarray
) -> float:
    """AUROC in percent of ``scores`` separating correct (positive) from wrong ID predictions.

    Misclassification detection as in FACETS Table VII: over the rows whose label is not -1,
    a row is correct when ``argmax(logits) == label``; the score should be higher on correct
    rows. Ties are counted as one half (same as ``roc_auc_score``).

    Raises:
        ValueError: every labelled row is correct, or every one is wrong (AUROC undefined),
            shapes disagree, or the scores hold NaN/inf.
    """
    s, correct = labelled_correctness(scores, logits, labels)
    n_ok = int(correct.sum())
    if n_ok == correct.size:
        raise ValueError(
            f"misclassification AUROC undefined: all {n_ok} labelled rows are classified "
            "correctly"
        )
    if n_ok == 0:
        raise ValueError(
            f"misclassification AUROC undefined: all {correct.size} labelled rows are "
            "misclassified"
        )
    a = _sorted_finite(s[correct], "misclassification/correct")
    b = _sorted_finite(s[~correct], "misclassification/wrong")
    return float(_walk_percent(a, b)[0])


def shift_sensitivity(level_means: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(correlation, sensitivity) of a metric against the shift level.

    IS-OOD (Long et al., NeurIPS 2024) §2.4, eqs. 5-6. ``level_means[l]`` is the metric's
    mean at shift level ``l = 0..L-1``. NaN entries (cells with N/A) are dropped together
    with their level index, and both centres are those of the PRESENT levels: eq. 6's x-bar
    is the mean of the present means and its level centre (n + 1) / 2 the mean of the present
    level indices (the same number when no level is missing), so the sums are those of the
    least-squares line through the present (level, mean) points. ``correlation`` is Pearson's r
    between the remaining means and their level indices (NaN if the means are all equal);
    ``sensitivity`` is ``|slope|`` of the least-squares line ``mean ~ level``, in the metric's
    unit per level. Means 60, 65, ..., 95 give (1.0, 5.0).

    Raises:
        ValueError: fewer than two non-NaN levels, an infinite entry, or input not 1-D.
    """
    m = np.asarray(level_means, dtype=np.float64)
    if m.ndim != 1:
        raise ValueError(f"level_means must be 1-D, got shape {m.shape}")
    if np.isinf(m).any():
        raise ValueError(f"level_means holds {int(np.isinf(m).sum())} infinite values")
    keep = ~np.isnan(m)
    if int(keep.sum()) < 2:
        raise ValueError(
            f"shift_sensitivity needs at least 2 non-NaN levels, got {int(keep.sum())} "
            f"of {m.size}"
        )
    x = np.arange(m.size, dtype=np.float64)[keep]
    y = m[keep]
    dx = x - x.mean()
    dy = y - y.mean()
    sxx = float(dx @ dx)
    syy = float(dy @ dy)
    sxy = float(dx @ dy)
    slope = sxy / sxx
    corr = sxy / np.sqrt(sxx * syy) if syy > 0.0 else float("nan")
    return float(corr), float(abs(slope))
