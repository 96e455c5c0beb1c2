"""GradNorm: gradient norm of the head (Huang, Geng, Li, "On the Importance of Gradients for
Detecting Distributional Shifts in the Wild", NeurIPS 2021).

Formula as implemented (float64), with h the penultimate feature and (W, b) the head:

    l      = h @ W.T + b                                   logits through the head
    L(h)   = sum_c -(1/C) log softmax(l)_c                 KL(uniform || softmax) + const
    dL/dW  = (softmax(l) - 1/C) outer h
    score  = ||dL/dW||_1 = ||softmax(l) - 1/C||_1 * ||h||_1

Higher is more in-distribution. Only the WEIGHT gradient is used, as in the official GradNorm
code and OpenOOD v1.5 `gradnorm_postprocessor.py` (the bias gradient, softmax(l) - 1/C, is not
added). The official code uses all-ones targets instead of 1/C, which multiplies every score by
C: the same ranking and the same metrics. The logits are recomputed from the stored features
through the head (what the gradient is taken of), not read from the store. Temperature 1, no
hyperparameters (OpenOOD v1.5 `configs/postprocessors/gradnorm.yml` has none).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import softmax
from ..paper import Paper


class GradNorm(Scorer):
    name = "gradnorm"
    needs = ("features", "head")
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("On the Importance of Gradients for Detecting Distributional "
                         "Shifts in the Wild"),
                  authors=("Huang", "Geng", "Li"), venue="NeurIPS", year=2021,
                  url="https://arxiv.org/abs/2110.00218",
                  code="https://github.com/deeplearning-wisc/gradnorm_ood")

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.bias = np.asarray(bias, dtype=np.float64)

    def _score(self, split: SplitLike) -> np.ndarray:
        num_classes = self.bias.shape[0]
        def block(x: np.ndarray) -> np.ndarray:
            x64 = x.astype(np.float64)
            prob = softmax(x64 @ self.weight_t + self.bias)
            return np.abs(prob - 1.0 / num_classes).sum(axis=1) * np.abs(x64).sum(axis=1)

        return self.map_rows(split, ("features",), block)
