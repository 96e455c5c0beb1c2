"""MDS ensemble: class-conditional Mahalanobis scores of several layers, summed (Lee, Lee, Lee
& Shin, "A simple unified framework for detecting out-of-distribution samples and adversarial
attacks", NeurIPS 2018, the feature ensemble; OpenOOD v1.5 `mds_ensemble_postprocessor.py`).

Reads the views `layer_features/<L>` (global average pools of the named modules, OpenOOD's
feature type "mean") that `featstore extract --feature-layers` writes. Formula as implemented,
per layer l, from the labelled id/train rows (labels in [0, C)):

    mu_lk   = mean of layer l's pooled features of class k        (classes with no rows left out)
    Sigma_l = (1/N) sum_i (f_l(x_i) - mu_{l,y_i})(...)^T           tied covariance (sklearn's
                                                                   EmpiricalCovariance on the
                                                                   class-centred rows)
    P_l     = pinvh(Sigma_l)                                       (its precision_)
    M_l(x)  = max_k -0.5 (f_l(x) - mu_lk)^T P_l (f_l(x) - mu_lk)
    score(x) = sum_l alpha_l M_l(x),   alpha_l = 1

as OpenOOD's `compute_Mahalanobis_score` with `noise: 0` and its config's `alpha_list: [1]`
per layer (`configs/postprocessors/mds_ensemble.yml`). The distances are `mds`'s
(`scorers.kernels.classstats.ClassMahalanobis`, `precision` as there).

Not implemented, and why: the input preprocessing of Lee et al. (a gradient step of size
`noise` = 0.0014 on the input before each layer's score) needs the network and one
perturbed pass per layer; no view carries it, so this is the noise-free ensemble (OpenOOD's
at noise 0). The logistic-regression weights alpha_l that Lee et al. fit on validation OOD
data are not fitted: alpha_l = 1, OpenOOD's configured default. `layers` (default null: every
stored layer, in the order `--feature-layers` named them) picks the ensemble. OpenOOD's only
swept hyperparameter is the noise, so the default grid is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.store.extra_keys import LAYER_FEATURES, layer_name
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.classstats import FIT_SPLIT, fit_gaussian_stats
from ..fitting.layers import parse_layers, require_view, resolve_layers
from ..kernels.classstats import ClassMahalanobis
from ..kernels.precision import DEFAULT_PRECISION, check_precision
from ..paper import Paper


class MDSEnsemble(Scorer):
    """sum over layers of max_k -0.5 (f_l - mu_lk)^T P_l (f_l - mu_lk) (higher = more ID)."""

    name = "mds_ensemble"
    needs = (f"extra:{LAYER_FEATURES}", "fit:id/train")
    defaults: ClassVar[dict[str, Any]] = {"layers": None, "precision": DEFAULT_PRECISION}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("A simple unified framework for detecting out-of-distribution "
                         "samples and adversarial attacks"),
                  authors=("Lee", "Lee", "Lee", "Shin"), venue="NeurIPS", year=2018,
                  url="https://arxiv.org/abs/1807.03888",
                  code="https://github.com/pokaxpoka/deep_Mahalanobis_detector",
                  note="feature ensemble without input preprocessing, alpha = 1")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_precision(self.name, params["precision"])
        parse_layers(self.name, "layers", params["layers"])

    def _fit(self, store: StoreLike) -> None:
        wanted = parse_layers(self.name, "layers", self.params["layers"])
        self.layers = resolve_layers(self.name, store, LAYER_FEATURES, wanted, FIT_SPLIT)
        self.fields = tuple(f"extra:{layer_name(LAYER_FEATURES, n)}" for n in self.layers)
        precision = self.params["precision"]
        self.mahas = []
        for field in self.fields:
            stats = fit_gaussian_stats(store, self.chunk_rows, self.name, with_global=False,
                                       field=field)
            self.mahas.append(ClassMahalanobis(stats.means, stats.within_cov.whitener(),
                                               stats.global_mean, precision,
                                               pruned_classes=precision == "float32"))

    def _score(self, split: SplitLike) -> np.ndarray:
        for field in self.fields:
            require_view(self.name, split, field.removeprefix("extra:"))

        def block(*views: np.ndarray) -> np.ndarray:
            total = np.zeros(views[0].shape[0])
            for maha, feats in zip(self.mahas, views, strict=True):
                total -= 0.5 * maha.min_sq(feats)
            return total

        return self.map_rows(split, self.fields, block)
