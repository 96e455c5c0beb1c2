"""MCD: discrepancy between the two classifier heads of an MCD model.

Paper: Yu & Aizawa, "Unsupervised Out-of-Distribution Detection by Maximum Classifier
Discrepancy", ICCV 2019 (the remote-sensing benchmark's eq. 14).

Reads the logits (head 1) and the split extra `head2_logits` (N, C) that extraction writes
for a model with a `head2` (`featstore train --method mcd`). With p1 = softmax(l1),
p2 = softmax(l2) and H the entropy, formula as implemented, per `variant`:

    "l1"       score = -sum_c |p1_c - p2_c|                             (default)
    "entropy"  score = -(H(p1) - H(p2))                                  (eq. 14, negated)

"l1" without saturation: where both heads put their largest probability on the same class a
(p1_a, p2_a > 1/2), its term is |(1 - p2_a) - (1 - p1_a)| with 1 - p = r / (1 + r), r the sum
of the head's other exponentials (`scorers.kernels.softmax.max_softmax_complement`), not
|p1_a - p2_a| of two values that round to 1.0: the score keeps the heads' disagreement (and
the rows' order) until exp underflows (top-logit gaps ~745), where p1 - p2 itself would be
0 from gaps of ~37 on. Every other term is |p1_c - p2_c| of the float64 softmaxes (one of
them <= 1/2, so no cancellation below the term's own size).

Default "l1": the discrepancy Yu & Aizawa threshold at test time and OpenOOD v1.5
`mcd_postprocessor.py` computes. "entropy" is the benchmark's eq. 14 d = H(p1) - H(p2), the
quantity the training maximises on unlabelled (outlier) data, so a large d means OOD. Higher
score = more in-distribution for both. No sweep grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.store.extra_keys import HEAD2_LOGITS
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import max_softmax_complement, softmax
from ..paper import Paper
from .entropy import neg_entropy

VARIANTS = ("l1", "entropy")


def l1_discrepancy(logits1: np.ndarray, logits2: np.ndarray) -> np.ndarray:
    """sum_c |p1_c - p2_c| per row, the shared top class's term from the complements 1 - p
    (module docstring)."""
    diff = np.abs(softmax(logits1) - softmax(logits2))
    top1, q1 = max_softmax_complement(logits1)
    top2, q2 = max_softmax_complement(logits2)
    shared = np.flatnonzero((top1 == top2) & (q1 < 0.5) & (q2 < 0.5))
    diff[shared, top1[shared]] = np.abs(q2[shared] - q1[shared])
    return diff.sum(axis=1)


def mcd_scores(logits1: np.ndarray, logits2: np.ndarray, variant: str) -> np.ndarray:
    if variant == "l1":
        return -l1_discrepancy(logits1, logits2)
    # -(H1 - H2) = (-H1) - (-H2)
    return neg_entropy(logits1) - neg_entropy(logits2)


class MCD(Scorer):
    """Negative discrepancy of the two heads' softmax outputs (higher = more ID)."""

    name = "mcd"
    needs = ("logits", f"extra:{HEAD2_LOGITS}")
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {"variant": "l1"}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Unsupervised Out-of-Distribution Detection by Maximum "
                         "Classifier Discrepancy"),
                  authors=("Yu", "Aizawa"), venue="ICCV", year=2019,
                  url="https://arxiv.org/abs/1908.04951", code=None)

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "variant", VARIANTS)

    def score_form(self) -> str:
        # "l1": scores cached by the saturating computation are not read back
        return "unsaturated" if self.params["variant"] == "l1" else ""

    def _score(self, split: SplitLike) -> np.ndarray:
        variant = self.params["variant"]
        return self.map_rows(split, ("logits", f"extra:{HEAD2_LOGITS}"),
                             lambda l1, l2: mcd_scores(l1, l2, variant))
