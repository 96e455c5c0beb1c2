"""Negative predictive entropy.

Reference: the Shannon entropy of the softmax as an uncertainty / OOD baseline (e.g.
Lakshminarayanan, Pritzel & Blundell, "Simple and Scalable Predictive Uncertainty Estimation
using Deep Ensembles", NeurIPS 2017, who use it to flag unknown classes).

Formula as implemented, for logits l in R^C, p = softmax(l):

    score(x) = -H(p) = sum_k p_k log p_k,   with log p_k = l_k - logsumexp(l)

computed from one exp pass as (sum_k e_k z_k) / s - log s, with z = l - max(l), e = exp(z),
s = sum(e). The log-probabilities come from the logsumexp, not from log(p), so a probability that
underflows to 0 contributes 0 * (finite) = 0 (the 0 log 0 = 0 convention) and no epsilon is
needed. The score lies in [-log C, 0]. No hyperparameters, so no grid.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike

from ..base import Scorer
from ..kernels.softmax import neg_entropy as _neg_entropy
from ..paper import Paper


def neg_entropy(logits: np.ndarray) -> np.ndarray:
    """Row-wise sum_k p_k log p_k of p = softmax(l), float64
    (`scorers.kernels.softmax.neg_entropy`: one fused pass per row, no probability matrix)."""
    return _neg_entropy(logits)


class Entropy(Scorer):
    """Negative entropy of the softmax: sum_k p_k log p_k (higher = more ID)."""

    name = "entropy"
    needs = ("logits",)
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Simple and Scalable Predictive Uncertainty Estimation using "
                         "Deep Ensembles"),
                  authors=("Lakshminarayanan", "Pritzel", "Blundell"), venue="NeurIPS", year=2017,
                  url="https://arxiv.org/abs/1612.01474", code=None,
                  note="Shannon entropy of the predictive distribution, as used there")

    def _score(self, split: SplitLike) -> np.ndarray:
        return self.map_rows(split, ("logits",), neg_entropy)
