"""Maximum softmax probability (MSP).

Paper: Hendrycks & Gimpel, "A Baseline for Detecting Misclassified and Out-of-Distribution
Examples in Neural Networks", ICLR 2017.

Formula as implemented, for logits l in R^C:

    score(x) = log max_k softmax(l)_k = max_k l_k - logsumexp(l) = -log sum_k exp(l_k - max_j l_j)
             = -log1p(sum_{k != argmax} exp(l_k - max_j l_j))

computed in float64 as the last form, in one fused pass per row
(`scorers.kernels.softmax.log_max_softmax`). The LOG of the paper's probability: it ranks
exactly like max_k softmax(l)_k (same AUROC, FPR, ...; exp(score) gives the probability back),
but the probability rounds to 1.0 for every row whose top-logit gap exceeds ~36.7 and ties
them, while the log form separates rows up to gaps of ~745 (DESIGN §4). No
hyperparameters, so no grid (OpenOOD v1.5 `configs/postprocessors/msp.yml` has none either).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike

from ..base import Scorer
from ..kernels.softmax import log_max_softmax
from ..paper import Paper


class MSP(Scorer):
    """Log of the maximum softmax probability: log max_k softmax(l)_k (higher = more ID)."""

    name = "msp"
    needs = ("logits",)
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("A Baseline for Detecting Misclassified and "
                         "Out-of-Distribution Examples in Neural Networks"),
                  authors=("Hendrycks", "Gimpel"), venue="ICLR", year=2017,
                  url="https://arxiv.org/abs/1610.02136",
                  code="https://github.com/hendrycks/error-detection")

    def score_form(self) -> str:
        return "log_prob"

    def _score(self, split: SplitLike) -> np.ndarray:
        return self.map_rows(split, ("logits",), log_max_softmax)
