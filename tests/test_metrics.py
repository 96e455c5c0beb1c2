"""Tests for scorers.metrics.

The reference for every OOD metric is scikit-learn on the same input (DESIGN.md section 4):
``roc_auc_score``; ``roc_curve(..., drop_intermediate=False)`` for fpr95, fpr95_ood and the
detection error; ``precision_recall_curve`` + ``auc`` for the AUPRs; ``average_precision_score``
for the APs. Each test says which reference it uses.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    auc,
    average_precision_score,
    precision_recall_curve,
    roc_auc_score,
    roc_curve,
)

from scorers.metrics import (
    METRIC_DIRECTIONS,
    OOD_METRIC_NAMES,
    id_accuracy,
    misclassification_auroc,
    ood_metrics,
    shift_sensitivity,
)

REL = 1e-9
ABS = 1e-9  # percent; for metrics that are exactly 0


def sklearn_metrics(id_scores: np.ndarray, ood_scores: np.ndarray) -> dict[str, float]:
    """The same nine numbers from scikit-learn, in percent (the reference)."""
    a = np.asarray(id_scores, dtype=np.float64)
    b = np.asarray(ood_scores, dtype=np.float64)
    s = np.concatenate([a, b])
    y = np.concatenate([np.ones(a.size, dtype=int), np.zeros(b.size, dtype=int)])
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    fpr_o, tpr_o, _ = roc_curve(1 - y, -s, drop_intermediate=False)
    p_in, r_in, _ = precision_recall_curve(y, s)
    p_out, r_out, _ = precision_recall_curve(1 - y, -s)
    ref = {
        "auroc": roc_auc_score(y, s),
        "aupr_in": auc(r_in, p_in),
        "aupr_out": auc(r_out, p_out),
        "ap_in": average_precision_score(y, s),
        "ap_out": average_precision_score(1 - y, -s),
        "fpr95": fpr[np.argmax(tpr >= 0.95)],
        "fpr95_ood": fpr_o[np.argmax(tpr_o >= 0.95)],
        "detection_error": np.min(0.5 * (1.0 - tpr) + 0.5 * fpr),
        "detection_error_tpr95": (0.5 * (1.0 - tpr[np.argmax(tpr >= 0.95)])
                                  + 0.5 * fpr[np.argmax(tpr >= 0.95)]),
    }
    return {k: 100.0 * float(v) for k, v in ref.items()}


def assert_matches_sklearn(id_scores: np.ndarray, ood_scores: np.ndarray) -> dict[str, float]:
    got = ood_metrics(id_scores, ood_scores)
    ref = sklearn_metrics(id_scores, ood_scores)
    assert list(got) == list(OOD_METRIC_NAMES)
    for k in OOD_METRIC_NAMES:
        assert isinstance(got[k], float)
        assert 0.0 <= got[k] <= 100.0
        assert got[k] == pytest.approx(ref[k], rel=REL, abs=ABS), k
    return got


# --------------------------------------------------------------------------- vs sklearn


def test_random_continuous() -> None:
    """Reference: sklearn (all four functions), Gaussian scores without ties."""
    rng = np.random.default_rng(0)
    assert_matches_sklearn(rng.normal(1.0, 1.0, 3000), rng.normal(0.0, 1.0, 2000))


def test_heavy_ties() -> None:
    """Reference: sklearn; integer scores in 0..5, so nearly every score is tied."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 6, 4000).astype(np.float64)
    b = rng.integers(0, 4, 3000).astype(np.float64)
    assert_matches_sklearn(a, b)


def test_ties_large_rounded() -> None:
    """Reference: sklearn; 200k rounded scores (many tie groups, long sums)."""
    rng = np.random.default_rng(2)
    a = np.round(rng.normal(0.5, 1.0, 120_000), 2)
    b = np.round(rng.normal(0.0, 1.0, 80_000), 2)
    assert_matches_sklearn(a, b)


def test_imbalanced() -> None:
    """Reference: sklearn; 10 ID against 5000 OOD, and the reverse."""
    rng = np.random.default_rng(3)
    assert_matches_sklearn(rng.normal(1.0, 1.0, 10), rng.normal(0.0, 1.0, 5000))
    assert_matches_sklearn(rng.normal(1.0, 1.0, 5000), rng.normal(0.0, 1.0, 10))


def test_all_identical() -> None:
    """Reference: sklearn and by hand: one tie group -> chance AUROC, precision = prevalence."""
    got = assert_matches_sklearn(np.full(3, 0.7), np.full(2, 0.7))
    assert got["auroc"] == 50.0
    assert got["ap_in"] == pytest.approx(60.0)
    assert got["aupr_in"] == pytest.approx(80.0)  # trapezoid from (0, 1) to (1, 0.6)
    assert got["fpr95"] == 100.0
    assert got["fpr95_ood"] == 100.0
    assert got["detection_error"] == 50.0


def test_perfect_separation() -> None:
    """Reference: sklearn and by hand: every ID score above every OOD score."""
    rng = np.random.default_rng(4)
    got = assert_matches_sklearn(rng.uniform(2, 3, 500), rng.uniform(0, 1, 300))
    for k in ("auroc", "aupr_in", "aupr_out", "ap_in", "ap_out"):
        assert got[k] == 100.0
    for k in ("fpr95", "fpr95_ood", "detection_error"):
        assert got[k] == 0.0


def test_reversed_separation() -> None:
    """Reference: sklearn; every ID score below every OOD score (worst case)."""
    got = assert_matches_sklearn(np.arange(5.0), np.arange(10.0, 17.0))
    assert got["auroc"] == 0.0
    assert got["fpr95"] == 100.0


def test_single_sample_each_and_signed_zero() -> None:
    """Reference: sklearn; one score per side, and -0.0 tied with 0.0."""
    assert_matches_sklearn(np.array([1.0]), np.array([0.0]))
    assert_matches_sklearn(np.array([0.0, 1.0]), np.array([-0.0, 2.0]))


def test_input_dtypes() -> None:
    """Reference: float64 result of the same values; float32, int and list inputs agree."""
    rng = np.random.default_rng(5)
    a32 = rng.normal(1, 1, 500).astype(np.float32)
    b32 = rng.normal(0, 1, 400).astype(np.float32)
    assert ood_metrics(a32, b32) == ood_metrics(a32.astype(np.float64), b32.astype(np.float64))
    ai = rng.integers(0, 10, 100)
    bi = rng.integers(0, 8, 80)
    assert ood_metrics(ai, bi) == ood_metrics(list(ai.astype(float)), list(bi.astype(float)))


floats = st.one_of(
    st.sampled_from([-1.0, -0.0, 0.0, 0.25, 0.5, 1.0, 3.0]),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(floats, min_size=1, max_size=40),
    st.lists(floats, min_size=1, max_size=40),
)
def test_property_matches_sklearn(id_list: list[float], ood_list: list[float]) -> None:
    """Reference: sklearn; hypothesis lists of floats with many ties, >= 1 score per side."""
    assert_matches_sklearn(np.array(id_list), np.array(ood_list))


# --------------------------------------------------------------------------- by hand


def test_hand_computed_fpr95_and_detection_error() -> None:
    """Reference: computed by hand.

    ID = 1..20, OOD = {0.5, 2.5, 5.5, 25}.
    fpr95: keeping >= 95% of ID (19 of 20) needs threshold 2; OOD >= 2 are 2.5, 5.5, 25 -> 75%.
    fpr95_ood: catching >= 95% of OOD needs all 4 (score <= 25), which rejects all 20 ID -> 100%.
    detection_error: at threshold 6, TPR = 15/20, FPR = 1/4 -> 0.5*0.25 + 0.5*0.25 = 25%,
    the minimum over all thresholds (e.g. threshold 7: 0.15+0.125; threshold 3: 0.05+0.25).
    """
    got = ood_metrics(np.arange(1.0, 21.0), np.array([0.5, 2.5, 5.5, 25.0]))
    assert got["fpr95"] == pytest.approx(75.0)
    assert got["fpr95_ood"] == pytest.approx(100.0)
    assert got["detection_error"] == pytest.approx(25.0)


def test_hand_computed_exact_95_percent() -> None:
    """Reference: by hand (and sklearn); TPR hits exactly 0.95, which counts as reached.

    ID = 1..20, OOD = 16 x {-1} + {0.5, 1.5, 2.5, 3.5}.
    fpr95: threshold 2 keeps 19/20 ID (TPR 0.95); OOD >= 2 are 2.5, 3.5 -> 2/20 = 10%.
    fpr95_ood: OOD <= 2.5 are 19/20 (0.95); ID <= 2.5 are 1, 2 -> 2/20 = 10%
    (with ">" instead of ">=" it would be 3.5 and 15%).
    detection_error: threshold 4: TPR 17/20, FPR 0 -> 0.5 * 0.15 = 7.5%, the minimum.
    """
    a = np.arange(1.0, 21.0)
    b = np.concatenate([np.full(16, -1.0), [0.5, 1.5, 2.5, 3.5]])
    got = assert_matches_sklearn(a, b)
    assert got["fpr95"] == pytest.approx(10.0)
    assert got["fpr95_ood"] == pytest.approx(10.0)
    assert got["detection_error"] == pytest.approx(7.5)


def test_hand_computed_auroc_with_ties() -> None:
    """Reference: by hand, pairs counted (ties = 1/2): ID {1, 2}, OOD {1, 0} -> (1.5+2)/4."""
    assert ood_metrics([1.0, 2.0], [1.0, 0.0])["auroc"] == pytest.approx(87.5)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_names_split_and_count(bad: float) -> None:
    """Reference: the error contract of DESIGN.md section 4 (name the split and the count)."""
    ood = np.array([0.1, bad, 0.3, bad, bad, 0.2])
    with pytest.raises(ValueError, match=r"split 'ood/far/noise': 3 non-finite scores"):
        ood_metrics([1.0, 2.0], ood, id_name="id/test", ood_name="ood/far/noise")
    with pytest.raises(ValueError, match=r"split 'id/test': 1 non-finite scores") as e:
        ood_metrics([1.0, bad], [0.0], id_name="id/test", ood_name="ood/far/noise")
    assert "\n" not in str(e.value)


def test_empty_names_split() -> None:
    """Reference: the error contract (empty split -> ValueError naming it)."""
    with pytest.raises(ValueError, match=r"split 'ood/near/ssb_hard'.*empty"):
        ood_metrics([1.0], [], ood_name="ood/near/ssb_hard")
    with pytest.raises(ValueError, match=r"split 'id'.*empty"):
        ood_metrics(np.array([]), [1.0])


def test_not_1d() -> None:
    """Reference: the API contract (scores are (N,))."""
    with pytest.raises(ValueError, match=r"split 'id'.*1-D"):
        ood_metrics(np.zeros((3, 2)), [1.0])


# --------------------------------------------------------------------------- accuracy etc.


def _classification_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, c = 400, 7
    labels = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c))
    logits[np.arange(n), labels] += 1.0  # about half correct
    labels[rng.random(n) < 0.1] = -1
    scores = logits.max(axis=1) + rng.normal(scale=0.5, size=n)
    return logits, labels, scores


def test_id_accuracy() -> None:
    """Reference: direct numpy argmax == label over rows with label != -1."""
    logits, labels, _ = _classification_data()
    m = labels != -1
    ref = 100.0 * np.mean(np.argmax(logits[m], axis=1) == labels[m])
    assert id_accuracy(logits, labels) == pytest.approx(ref, rel=1e-12)


def test_id_accuracy_errors() -> None:
    """Reference: the API contract (no labelled row, bad label -> ValueError)."""
    with pytest.raises(ValueError, match="no labelled rows"):
        id_accuracy(np.zeros((3, 2)), np.full(3, -1))
    with pytest.raises(ValueError, match="outside"):
        id_accuracy(np.zeros((2, 2)), np.array([0, 5]))


def test_misclassification_auroc() -> None:
    """Reference: sklearn roc_auc_score(correct, score) over labelled rows."""
    logits, labels, scores = _classification_data()
    m = labels != -1
    correct = np.argmax(logits[m], axis=1) == labels[m]
    ref = 100.0 * roc_auc_score(correct.astype(int), scores[m])
    assert misclassification_auroc(scores, logits, labels) == pytest.approx(ref, rel=REL)
    # Tied (rounded) scores too.
    s2 = np.round(scores, 0)
    ref2 = 100.0 * roc_auc_score(correct.astype(int), s2[m])
    assert misclassification_auroc(s2, logits, labels) == pytest.approx(ref2, rel=REL)


def test_misclassification_auroc_degenerate() -> None:
    """Reference: the API contract (all correct / all wrong -> ValueError naming it)."""
    logits = np.eye(3)
    with pytest.raises(ValueError, match="all 3 labelled rows are classified correctly"):
        misclassification_auroc(np.ones(3), logits, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="all 3 labelled rows are misclassified"):
        misclassification_auroc(np.ones(3), logits, np.array([1, 2, 0]))


def test_shift_sensitivity() -> None:
    """Reference: by hand (means 60..95 step 5 -> r = 1, slope 5) and numpy corrcoef/polyfit."""
    r, s = shift_sensitivity(np.arange(60.0, 96.0, 5.0))
    assert r == pytest.approx(1.0, abs=1e-12)
    assert s == pytest.approx(5.0, rel=1e-12)
    assert (round(r, 2), round(s, 2)) == (1.00, 5.00)
    # Decreasing metric: negative correlation, positive sensitivity.
    r, s = shift_sensitivity([90.0, 80.0, 75.0, 60.0])
    x = np.arange(4.0)
    y = np.array([90.0, 80.0, 75.0, 60.0])
    assert r == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    assert s == pytest.approx(abs(np.polyfit(x, y, 1)[0]), rel=1e-12)


def test_shift_sensitivity_skips_nan() -> None:
    """Reference: numpy corrcoef/polyfit on the non-NaN levels with their original indices."""
    m = np.array([60.0, np.nan, 70.0, 71.0, np.nan, 90.0])
    keep = ~np.isnan(m)
    x = np.arange(m.size, dtype=float)[keep]
    r, s = shift_sensitivity(m)
    assert r == pytest.approx(np.corrcoef(x, m[keep])[0, 1], rel=1e-12)
    assert s == pytest.approx(abs(np.polyfit(x, m[keep], 1)[0]), rel=1e-12)
    # Index kept: 60 at level 0 and 70 at level 2 -> slope 5, not 10.
    assert shift_sensitivity([60.0, np.nan, 70.0]) == pytest.approx((1.0, 5.0))


def test_shift_sensitivity_errors() -> None:
    """Reference: the API contract (fewer than 2 valid levels -> ValueError)."""
    with pytest.raises(ValueError, match="at least 2"):
        shift_sensitivity([np.nan, 50.0, np.nan])
    with pytest.raises(ValueError, match="at least 2"):
        shift_sensitivity([])


def test_metric_directions() -> None:
    """Reference: DESIGN.md section 4 (higher AUROC/AUPR/AP better, lower FPR/error better)."""
    assert set(METRIC_DIRECTIONS) == set(OOD_METRIC_NAMES)
    for k in ("auroc", "aupr_in", "aupr_out", "ap_in", "ap_out"):
        assert METRIC_DIRECTIONS[k] == "max"
    for k in ("fpr95", "fpr95_ood", "detection_error"):
        assert METRIC_DIRECTIONS[k] == "min"


def test_scorers_metrics_does_not_import_torch() -> None:
    """Reference: DESIGN.md section 1 (scorers never imports torch)."""
    code = "import sys, scorers.metrics; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_misclassification_fpr95_and_detection_error_by_hand():
    """FACETS Table VII layout on 7 rows (one unlabelled, ignored), computed by hand:
    correct rows (positives) score 0.9 0.8 0.7 0.6, misclassified 0.75 0.1.
    FPR95: keeping >= 95% of the correct rows needs threshold 0.6, which accepts 0.75 of the
    two errors -> 50%. AUROC: 6 of the 8 (correct, wrong) pairs ordered -> 75%. Detection
    error: min over thresholds of 0.5(1 - TPR) + 0.5 FPR: t = 0.8 (TPR .5, FPR 0) and t = 0.6
    (TPR 1, FPR .5) give 0.25 -> 25%. Two errors < 20: a warning."""
    from scorers.misclassification import (
        MIN_ERRORS,
        misclassification_metrics,
        misclassification_or_none,
    )

    logits = np.array([[2.0, 0.0]] * 4 + [[0.0, 2.0]] * 2 + [[2.0, 0.0]])
    labels = np.array([0, 0, 0, 0, 0, 0, -1])
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.75, 0.1, 5.0])
    m = misclassification_metrics(scores, logits, labels)
    assert m["fpr95"] == pytest.approx(50.0)
    assert m["auroc"] == pytest.approx(75.0)
    assert m["detection_error"] == pytest.approx(25.0)
    assert (m["errors"], m["correct"]) == (2, 4)
    assert MIN_ERRORS == 20 and "only 2 misclassified rows (< 20)" in m["warning"]
    assert m["auroc"] == pytest.approx(misclassification_auroc(scores, logits, labels))
    many = misclassification_metrics(np.r_[scores[:6], np.linspace(0, 1, 20)],
                                      np.r_[logits[:6], [[0.0, 2.0]] * 20],
                                      np.r_[labels[:6], [0] * 20])
    assert many["errors"] == 22 and many["warning"] is None
    assert misclassification_or_none(scores[:4], logits[:4], labels[:4]) is None  # no error
    with pytest.raises(ValueError, match="0 of 4 labelled rows are misclassified"):
        misclassification_metrics(scores[:4], logits[:4], labels[:4])


# FACETS (Recalcati et al., DSAA 2023), Table VI "FPR@95%TPR / Detection Error" cells of MSP,
# TS, MLV and ODIN, and Table VII's MSP row, copied from
# ../shared/papers/facets-realistic-ood-benchmark-dsaa-2023.md: cells whose threshold reaches
# 95% TPR (nearly) exactly, so DE = 0.5 (1 - TPR(t*)) + 0.5 FPR(t*) = 2.5 + FPR95 / 2.
FACETS_CELLS = [
    (22.36, 13.68), (86.85, 45.91), (87.22, 46.11), (87.64, 46.32), (88.66, 46.83),
    (82.64, 43.82), (82.44, 43.72),                                  # MSP, Table VI
    (4.50, 4.75), (79.69, 42.34), (81.28, 43.14), (85.30, 45.15), (74.19, 39.60),  # TS
    (79.67, 42.33), (74.02, 39.51),                                  # MLV
    (10.34, 7.67), (84.43, 44.72), (79.11, 42.05),                   # ODIN
    (76.33, 40.66),                                                  # MSP, Table VII
]


@pytest.mark.parametrize(("fpr95", "paper_de"), FACETS_CELLS)
def test_detection_error_tpr95_reproduces_facets_table(fpr95: float, paper_de: float) -> None:
    """Scores built so that FPR95 is the paper's value exactly (2000 ID rows 1..2000: the 95%
    TPR threshold is 101; of 10000 OOD rows, round(100 * FPR95) sit above it): the FACETS
    detection error equals the paper's printed value to its rounding (both columns are
    rounded to 0.01, so they can differ by 0.015), while the min-over-thresholds
    `detection_error` is a different, smaller number."""
    k = round(fpr95 * 100)
    id_scores = np.arange(1.0, 2001.0)
    ood_scores = np.concatenate([np.full(k, 150.5), np.full(10000 - k, 0.5)])
    got = ood_metrics(id_scores, ood_scores)
    assert got["fpr95"] == pytest.approx(fpr95, abs=1e-9)
    assert got["detection_error_tpr95"] == pytest.approx(2.5 + fpr95 / 2, abs=1e-9)
    assert abs(got["detection_error_tpr95"] - paper_de) <= 0.0151
    assert got["detection_error"] < got["detection_error_tpr95"]


def test_detection_error_tpr95_is_at_the_achieved_tpr() -> None:
    """FACETS' Detection Error at the threshold t* actually reached (issue 46.6): 0.5 (1 -
    TPR(t*)) + 0.5 FPR(t*), not 0.5 (1 - 0.95) + 0.5 FPR95. By hand: ID scores 2 x 18, 1 x 2;
    at t = 2 TPR = 0.9, at t* = 1 TPR = 1.0 (the first >= 0.95) with 6 of 10 OOD rows at or
    above it (FPR 0.6): DE = 0.5 * 0 + 0.5 * 0.6 = 30% (the fixed-0.95 form gave 32.5%)."""
    got = ood_metrics(np.array([2.0] * 18 + [1.0] * 2),
                      np.array([0.5] * 4 + [1.0] * 1 + [3.0] * 5))
    assert got["fpr95"] == pytest.approx(60.0, abs=1e-12)
    assert got["detection_error_tpr95"] == pytest.approx(30.0, abs=1e-12)


def test_detection_error_tpr95_reproduces_oodl_baseline_cell() -> None:
    """FACETS Table VI, Baseline, OODL: 0.37 / 1.61, below 2.5 + 0.37 / 2 = 2.685 (a coarse
    score whose threshold overshoots 95% TPR). 2000 ID rows, 1800 at 10, 143 at 5, 57 at 1
    (TPR 0.90 at t = 10, 0.9715 at t* = 5); of 10000 OOD rows 37 at 7: FPR(t*) = 0.37%, DE =
    0.5 (100 - 97.15) + 0.5 (0.37) = 1.61, the paper's cell (by hand)."""
    got = ood_metrics(np.array([10.0] * 1800 + [5.0] * 143 + [1.0] * 57),
                      np.array([7.0] * 37 + [0.0] * 9963))
    assert got["fpr95"] == pytest.approx(0.37, abs=1e-12)
    assert got["detection_error_tpr95"] == pytest.approx(1.61, abs=1e-12)
