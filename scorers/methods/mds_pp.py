"""Mahalanobis++: the class-conditional Mahalanobis distance of L2-normalized features
(Mueller & Hein, ICML 2025, "Mahalanobis++: Improving OOD Detection via Feature
Normalization"; code github.com/mueller-mp/maha-norm).

As implemented: every feature row (id/train's and the scored split's) is first projected to
the unit sphere, x' = x / ||x||_2 (float64; an all-zero row stays 0), then `mds` runs on x'
unchanged (`scorers.methods.mds`, whose docstring states the rest):

    mu_k  = mean of x' over the id/train rows labelled k
    Sigma = (1/N) sum_i (x'_i - mu_{y_i})(x'_i - mu_{y_i})^T       (tied, sklearn 1/N)
    score(x) = - min_k (x' - mu_k)^T pinvh(Sigma) (x' - mu_k)

The paper's eq. (Mahalanobis++) is this distance of the normalized features, class means and
shared covariance estimated from the normalized training features; its code normalizes with
x / ||x|| before the OpenOOD-style Mahalanobis fit, as here. `precision` as `mds`. No
hyperparameters.
"""

from __future__ import annotations

from typing import ClassVar

from ..paper import Paper
from .mds import MDS

MAHA_PP = Paper(title="Mahalanobis++: Improving OOD Detection via Feature Normalization",
                authors=("Mueller", "Hein"), venue="ICML", year=2025,
                url="https://arxiv.org/abs/2505.18032",
                code="https://github.com/mueller-mp/maha-norm")


class MDSPlusPlus(MDS):
    """Negative minimum class-conditional Mahalanobis distance of L2-normalized features."""

    name = "mds_pp"
    normalize: ClassVar[bool] = True
    paper = MAHA_PP
