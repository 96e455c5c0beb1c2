"""MDS: class-conditional Mahalanobis distance (Lee, Lee, Lee, Shin, NeurIPS 2018, "A simple
unified framework for detecting out-of-distribution samples and adversarial attacks"), the
feature-only variant of OpenOOD v1.5's `MDSPostprocessor`: penultimate features only, no input
preprocessing, no layer ensemble, no logistic-regression weights.

As implemented, from the labelled rows of id/train (labels in [0, C); rows labelled -1 are
ignored):

    mu_k  = mean of the features of class k            (classes with no rows are left out)
    Sigma = (1/N) sum_i (x_i - mu_{y_i})(x_i - mu_{y_i})^T     (tied covariance; the 1/N
            convention of sklearn's EmpiricalCovariance, which OpenOOD fits on the
            class-centered features)
    P     = pinvh(Sigma) = L L^T                       (symmetric pseudo-inverse, as
                                                        EmpiricalCovariance.precision_;
                                                        L = V diag(1/sqrt(s)) over the kept
                                                        eigenpairs, `whitener`)
    score(x) = - min_k (x - mu_k)^T P (x - mu_k) = - min_k ||(x - mu_k) L||^2

OpenOOD returns max_k of -(x - mu_k)^T P (x - mu_k), the same number. The squared distances
are evaluated in chunks with matrix algebra, after subtracting the global train mean m from x
and from every mu_k (distances are translation-invariant; this limits cancellation): with
z = (x - m) L and z_k = (mu_k - m) L, ||z||^2 - 2 z . z_k + ||z_k||^2 (r = rank(Sigma) columns:
D for a full-rank covariance, fewer than N for a small train set). Statistics are accumulated in
float64 over two streaming passes (means, then centered scatter). With fewer labelled rows
than dimensions (N < D, a small train set: Sigma has rank < N), pass 2 keeps the N x D
centered rows instead and L comes from their thin SVD (`whitener_from_rows`): the same
pseudo-inverse for O(N^2 D) instead of an O(D^3) eigendecomposition, and scoring costs
O(D r) per row instead of O(D^2). No hyperparameters.

`precision` ("float32" default | "float64"): the whitening product z = (x - m) L in float32
sgemm, and the class term min_k ||z - z_k||^2 by float32 products z . z_k that prune the
classes under a proven error bound, the remaining distances summed in float64
(`scorers.kernels.minsqdist`: the float64 minimum of those z); or all float64 BLAS. The
covariance (a float64 Gram sum, `scorers.kernels.gram`), its eigendecomposition and the means
are float64 either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.classstats import fit_gaussian_stats, unit_rows
from ..kernels.classstats import ClassMahalanobis
from ..kernels.precision import DEFAULT_PRECISION, check_precision
from ..paper import Paper


class MDS(Scorer):
    """Negative minimum class-conditional Mahalanobis distance (tied covariance)."""

    name = "mds"
    needs = ("features", "fit:id/train")
    defaults: ClassVar[dict[str, Any]] = {"precision": DEFAULT_PRECISION}
    grid: ClassVar[dict[str, list[Any]]] = {}
    # Mahalanobis++ (`mds_pp`): fit and score the L2-normalized rows x / ||x||_2
    normalize: ClassVar[bool] = False
    paper = Paper(
                  title=("A simple unified framework for detecting out-of-distribution "
                         "samples and adversarial attacks"),
                  authors=("Lee", "Lee", "Lee", "Shin"), venue="NeurIPS", year=2018,
                  url="https://arxiv.org/abs/1807.03888",
                  code="https://github.com/pokaxpoka/deep_Mahalanobis_detector")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_precision(self.name, params["precision"])

    def _fit(self, store: StoreLike) -> None:
        precision = self.params["precision"]
        stats = fit_gaussian_stats(store, self.chunk_rows, self.name, with_global=False,
                                   normalize=self.normalize)
        self.class_ids = stats.classes
        self.maha = ClassMahalanobis(stats.means, stats.within_cov.whitener(),
                                     stats.global_mean, precision,
                                     pruned_classes=precision == "float32")

    def _score(self, split: SplitLike) -> np.ndarray:
        if self.normalize:
            return self.map_rows(split, ("features",),
                                 lambda feats: -self.maha.min_sq(unit_rows(feats)))
        return self.map_rows(split, ("features",), lambda feats: -self.maha.min_sq(feats))
