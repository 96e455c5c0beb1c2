"""RMDS++: the relative Mahalanobis distance of L2-normalized features (Mueller & Hein, ICML
2025, "Mahalanobis++: Improving OOD Detection via Feature Normalization", which applies its
normalization to RMDS as well; code github.com/mueller-mp/maha-norm).

As implemented: every feature row is first projected to the unit sphere, x' = x / ||x||_2
(float64; an all-zero row stays 0), then `rmds` runs on x' unchanged (`scorers.methods.rmds`
states the rest):

    MD_k(x) = (x' - mu_k)^T P (x' - mu_k)    mu_k, P: class means and pinvh of the tied (1/N)
                                             within-class covariance of the normalized
                                             id/train rows
    MD_0(x) = (x' - m)^T P_0 (x' - m)        m, P_0: mean and pinvh of the (1/N) covariance
                                             of all normalized id/train rows
    score(x) = MD_0(x) - min_k MD_k(x)

float64, as `rmds`. No hyperparameters.
"""

from __future__ import annotations

from typing import ClassVar

from .mds_pp import MAHA_PP
from .rmds import RMDS


class RMDSPlusPlus(RMDS):
    """Negative minimum relative Mahalanobis distance of L2-normalized features."""

    name = "rmds_pp"
    normalize: ClassVar[bool] = True
    paper = MAHA_PP
