"""Maximum softmax probability (MSP).

Paper: Hendrycks & Gimpel, "A Baseline for Detecting Misclassified and Out-of-Distribution
Examples in Neural Networks", ICLR 2017.

Formula as implemented, for logits l in R^C:

    score(x) = max_k softmax(l)_k = exp(max_k l_k - logsumexp(l))

computed in float64 (max-subtracted logsumexp from `scorers.base`). No hyperparameters, so no
grid (OpenOOD v1.5 `configs/postprocessors/msp.yml` has none either).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base import Scorer, logsumexp


def max_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise max_k softmax(l / T)_k = exp(max(l) / T - logsumexp(l / T)), float64.

    For T > 0, max(l / T) == max(l) / T exactly (division is monotone and correctly rounded),
    and the max of the stored values widened to float64 is the widened max, so no float64 copy
    of the chunk is made for it. Shared by `msp`, `odin` and `temp_scaling`.
    """
    lmax = np.asarray(logits).max(axis=1).astype(np.float64) / temperature
    return np.exp(lmax - logsumexp(logits, temperature))


class MSP(Scorer):
    """Maximum softmax probability: max_k softmax(l)_k (higher = more ID)."""

    name = "msp"
    needs = ("logits",)
    defaults: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    paper = ("Hendrycks & Gimpel, A Baseline for Detecting Misclassified and "
             "Out-of-Distribution Examples in Neural Networks, ICLR 2017")

    def _score(self, split: Any) -> np.ndarray:
        return self.map_rows(split, ("logits",), max_softmax)
