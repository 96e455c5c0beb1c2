"""Selective-classification metrics of a confidence score on the ID split: AURC and AUGRC
(Traub et al., "Overcoming Common Flaws in the Evaluation of Selective Classification
Systems", NeurIPS 2024; their fd-shifts implementation), in percent.

Accepting the rows with ``score >= t`` at each distinct score value ``t`` (higher score = more
confident) gives coverage points ``C_k / n`` (rows accepted) with ``E_k`` of them
misclassified, for ``k = 1..K`` from the highest value down (``C_K = n``):

- AUGRC: area under the generalized risk ``E / n`` (errors accepted, over ALL rows) against
  coverage, trapezoids from the end point (0, 0) through every point;
- AURC: area under the selective risk ``E / C`` against coverage, with ``E`` linear in ``C``
  between points (the exact expected area when tied rows are accepted in random order):
  ``(1/n) [E_1 + sum_{k>1} (E_k - E_{k-1} + (E_{k-1} C_k - E_k C_{k-1}) ln(C_k / C_{k-1}) /
  (C_k - C_{k-1}))]`` (the first point's risk held down to coverage 0).

Lower is better for both. Over rows whose label is not -1; ``correct`` means ``argmax(logits)
== label``. With continuous scores AUGRC = ((1 - AUROC_f) acc + err / 2) err, AUROC_f the
misclassification AUROC (Traub et al., Eq. 4 and App.).
"""

from __future__ import annotations

import numpy as np

from .metric_steps import sel_walk
from .metrics import _labelled, _sorted_finite

SELECTIVE_METRIC_NAMES = ("aurc", "augrc")


def selective_metrics(scores: np.ndarray, logits: np.ndarray,
                      labels: np.ndarray) -> dict[str, float]:
    """``{"aurc", "augrc"}`` in percent of ``scores`` over the labelled ID rows.

    Raises:
        ValueError: shapes disagree, no labelled row, or non-finite scores.
    """
    lg, y, mask = _labelled(logits, labels)
    s = np.asarray(scores)
    if s.ndim != 1 or s.shape[0] != lg.shape[0]:
        raise ValueError(f"scores must have shape ({lg.shape[0]},), got {s.shape}")
    s = s[mask]
    _sorted_finite(s, "selective/id")
    correct = np.argmax(lg[mask], axis=1) == y[mask]
    vals = 100.0 * sel_walk(np.ascontiguousarray(np.sort(s[correct])[::-1], dtype=np.float64),
                            np.ascontiguousarray(np.sort(s[~correct])[::-1], dtype=np.float64))
    return {"aurc": float(vals[0]), "augrc": float(vals[1])}
