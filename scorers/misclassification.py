"""Misclassification detection in FACETS' Table VII layout: FPR@95%TPR, detection error and
AUROC of a score separating correctly classified ID rows from misclassified ones.

Recalcati, Garcea, Piano, Lamberti & Morra, "Toward a Realistic Benchmark for
Out-of-Distribution Detection", DSAA 2023, Table VII. As implemented, over the rows whose label
is not -1, a row is correct when argmax(logits) == label; correct rows are the positives
(a higher score should mean a correct prediction), misclassified rows the negatives, and
`scorers.metrics.ood_metrics(scores[correct], scores[wrong])` gives, in percent:

    fpr95            share of misclassified rows accepted at the highest threshold that keeps
                     >= 95% of the correct rows
    detection_error  min over thresholds of 0.5 (1 - TPR) + 0.5 FPR (end points included)
    detection_error_tpr95  0.5 (1 - TPR) + 0.5 fpr95 at fpr95's threshold and the TPR it
                           achieves, FACETS' "Detection Error" (§VI Table VII)
    auroc            P(score_correct > score_wrong) + 0.5 P(tie)  (= misclassification_auroc)

With fewer than `MIN_ERRORS` (20) misclassified rows the numbers rest on too few negatives to
be measured (FPR95 moves in steps of 100 / errors percent); the result then carries a
`warning` naming the count. With no error or no correct row the metrics are undefined
(ValueError).
"""

from __future__ import annotations

import numpy as np

from .metrics import labelled_correctness, ood_metrics

#: fewer misclassified rows than this: the result carries a warning
MIN_ERRORS = 20


def misclassification_metrics(scores: np.ndarray, logits: np.ndarray,
                              labels: np.ndarray) -> dict[str, float | int | str | None]:
    """{"fpr95", "detection_error", "detection_error_tpr95", "auroc" (percent), "errors",
    "correct", "warning"}.

    Raises:
        ValueError: shapes disagree, no labelled row, every labelled row right or every one
            wrong, or the scores hold NaN/inf.
    """
    s, correct = labelled_correctness(scores, logits, labels)
    errors = int((~correct).sum())
    if errors == 0 or errors == correct.size:
        raise ValueError(f"misclassification metrics undefined: {errors} of {correct.size} "
                         "labelled rows are misclassified")
    m = ood_metrics(s[correct], s[~correct], id_name="misclassification/correct",
                    ood_name="misclassification/wrong")
    warning = (f"only {errors} misclassified rows (< {MIN_ERRORS}): misclassification "
               "FPR95 / detection error / AUROC are too coarse to compare"
               if errors < MIN_ERRORS else None)
    return {"fpr95": m["fpr95"], "detection_error": m["detection_error"],
            "detection_error_tpr95": m["detection_error_tpr95"], "auroc": m["auroc"],
            "errors": errors, "correct": int(correct.sum()), "warning": warning}


def misclassification_or_none(scores: np.ndarray, logits: np.ndarray,
                              labels: np.ndarray) -> dict[str, float | int | str | None] | None:
    """`misclassification_metrics`, or None where they are undefined (no error, no correct
    row, no labelled row): JSON null, never a made-up number."""
    try:
        return misclassification_metrics(scores, logits, labels)
    except ValueError:
        return None
