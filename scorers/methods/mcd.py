"""MCD: discrepancy between the two classifier heads of an MCD model.

Paper: Yu & Aizawa, "Unsupervised Out-of-Distribution Detection by Maximum Classifier
Discrepancy", ICCV 2019 (the remote-sensing benchmark's eq. 14).

Reads the logits (head 1) and the split extra `head2_logits` (N, C) that extraction writes
for a model with a `head2` (`featstore train --method mcd`). With p1 = softmax(l1),
p2 = softmax(l2) and H the entropy, formula as implemented, per `variant`:

    "l1"       score = -sum_c |p1_c - p2_c|                             (default)
    "entropy"  score = -(H(p1) - H(p2))                                  (eq. 14, negated)

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
from ..kernels.softmax import softmax
from ..paper import Paper
from .entropy import neg_entropy

VARIANTS = ("l1", "entropy")


def mcd_scores(logits1: np.ndarray, logits2: np.ndarray, variant: str) -> np.ndarray:
    if variant == "l1":
        return -np.abs(softmax(logits1) - softmax(logits2)).sum(axis=1)
    # -(H1 - H2) = (-H1) - (-H2)
    return neg_entropy(logits1) - neg_entropy(logits2)


class MCD(Scorer):
    """Negative discrepancy of the two heads' softmax outputs (higher = more ID)."""

    name = "mcd"
    needs = ("logits", f"extra:{HEAD2_LOGITS}")
    defaults: ClassVar[dict[str, Any]] = {"variant": "l1"}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Unsupervised Out-of-Distribution Detection by Maximum "
                         "Classifier Discrepancy"),
                  authors=("Yu", "Aizawa"), venue="ICCV", year=2019,
                  url="https://arxiv.org/abs/1908.04951", code=None)

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "variant", VARIANTS)

    def _score(self, split: SplitLike) -> np.ndarray:
        variant = self.params["variant"]
        return self.map_rows(split, ("logits", f"extra:{HEAD2_LOGITS}"),
                             lambda l1, l2: mcd_scores(l1, l2, variant))
