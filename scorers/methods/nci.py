"""NCI: neural-collapse-inspired OOD detection (Liu, Qin, "Detecting Out-of-distribution
through the Lens of Neural Collapse", 2023, arXiv:2311.01479).

Formula as implemented (float64), exactly OpenOOD v1.5's `nci_postprocessor.py`, with h the
penultimate feature, l the stored logits, W the head's weight (C, D), c = argmax_j l_j (first
index on ties) and mu_G the id/train mean feature (the global mean):

    proximity = w_c . (h - mu_G) / ||h - mu_G||_2       (w_c NOT normalized, as in OpenOOD)
    score     = proximity + alpha * ||h||_1

i.e. the cosine between h - mu_G and the predicted class's weight, times ||w_c||, plus an L1
feature-norm term. Higher is more in-distribution. `alpha` >= 0, default 0.0001 (OpenOOD v1.5
`configs/postprocessors/nci.yml` `alpha: 0.0001`); default sweep grid: OpenOOD v1.5 `nci.yml`
`alpha_list: [0.0001, 0.001, 0.01, 0.1]`. The head's bias is not used. A zero ||h - mu_G|| is
clamped to the smallest positive float64 (proximity 0, never NaN).

Sharing: the proximity and the L1 norm are computed once per chunk, in one fused pass per row
(`scorers.kernels.rowfeat.nci_rows`: the argmax, ||h - mu_G||, w_c . (h - mu_G) and ||h||_1
from one read of the row); each alpha is one multiply-add.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.classstats import train_mean
from ..kernels.rowfeat import nci_rows
from ..paper import Paper


class NCI(Scorer):
    name = "nci"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"alpha": 0.0001}
    grid = {"alpha": [0.0001, 0.001, 0.01, 0.1]}
    paper = Paper(title="Detecting Out-of-distribution through the Lens of Neural Collapse",
                  authors=("Liu", "Qin"), venue="arXiv", year=2023,
                  url="https://arxiv.org/abs/2311.01479",
                  code="https://github.com/litianliu/NCI-OOD")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        alpha = params["alpha"]
        if (isinstance(alpha, bool) or not isinstance(alpha, numbers.Real)
                or not math.isfinite(alpha) or alpha < 0):
            raise UsageError(
                f"scorer {self.name!r}: alpha must be a finite number >= 0 (got {alpha!r})"
            )

    def _fit(self, store: StoreLike) -> None:
        weight, _ = store.head
        self.weight = np.asarray(weight, dtype=np.float64)
        self.mean = train_mean(self, store)

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        alphas = [float({**self.params, **s}["alpha"]) for s in settings]
        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            proximity, l1 = np.empty(x.shape[0]), np.empty(x.shape[0])
            nci_rows(x, logits.argmax(axis=1), self.weight, self.mean, proximity, l1)
            return [proximity + alpha * l1 for alpha in alphas]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(alphas))
