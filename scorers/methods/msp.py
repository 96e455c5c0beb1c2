"""Maximum softmax probability (MSP).

Paper: Hendrycks & Gimpel, "A Baseline for Detecting Misclassified and Out-of-Distribution
Examples in Neural Networks", ICLR 2017.

Formula as implemented, for logits l in R^C:

    score(x) = max_k softmax(l)_k = exp(max_k l_k - logsumexp(l)) = 1 / sum_k exp(l_k - max_j l_j)

computed in float64 as the last form, in one fused pass per row
(`scorers.kernels.softmax.max_softmax`). No
hyperparameters, so no grid (OpenOOD v1.5 `configs/postprocessors/msp.yml` has none either).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.interfaces import SplitLike

from ..base import Scorer
from ..kernels.softmax import max_softmax
from ..paper import Paper


class MSP(Scorer):
    """Maximum softmax probability: max_k softmax(l)_k (higher = more ID)."""

    name = "msp"
    needs = ("logits",)
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("A Baseline for Detecting Misclassified and "
                         "Out-of-Distribution Examples in Neural Networks"),
                  authors=("Hendrycks", "Gimpel"), venue="ICLR", year=2017,
                  url="https://arxiv.org/abs/1610.02136",
                  code="https://github.com/hendrycks/error-detection")

    def _score(self, split: SplitLike) -> np.ndarray:
        return self.map_rows(split, ("logits",), max_softmax)
