"""Gscore: unsupervised evaluation of OOD detection (torch-free).

Paper: Yuhang Zhang, Weihong Deng, Liang Zheng, "Unsupervised Evaluation of Out-of-distribution
Detection: A Data-centric Perspective". Given an UNLABELLED test set mixing ID and OOD
samples, the detector's scores are modelled as an IND and an OOD Gaussian, the distance
between the two is the Gscore G, and a line p = theta1 * G + theta0 fitted on labelled
meta-train sets predicts the detection metric p.

Modules, bottom first (docs/DESIGN.md, "Gscore", says what each computes): `spec` (variants,
targets, constants), `clustering` (exact 2-means, two-component GMM by EM), `engine` (the
IND/OOD Gaussians by Kmeans, GMM or UDE and their distance), `regression` (the line, tau,
RMSE, correlations), `metasets` (pooled scores, partitions, drawn meta-sets, their targets),
`baselines` (confidence score, Fréchet auto-evaluation), `results` (per-partition rows and
their intervals), `config` (an evaluation's options and description), `crossval` (the
cross-validated rounds), `protocol` (`evaluate_gscore`), `model` (`fit_gscore`,
`predict_gscore`, the JSON model). Each formula is stated in the docstring of the function
that implements it.
"""

from __future__ import annotations

from .baselines import confidence_baseline, frechet_distance, frechet_distances
from .clustering import gmm_params
from .engine import GscoreEngine, Pair, distance, kmeans_pair, pack
from .metasets import MetaSets, check_disjoint, partition_splits, set_sizes
from .model import GscoreModel, fit_gscore, predict_gscore
from .protocol import evaluate_gscore, gbench_protocol
from .regression import fit_line, fit_lines, fit_variant, search_tau
from .spec import (
    DEFAULT_MODELS,
    DISTANCES,
    MODELLINGS,
    TARGETS,
    ModelSpec,
    parse_model,
    parse_ratio,
    ratio_label,
)

__all__ = [
    "DEFAULT_MODELS", "DISTANCES", "MODELLINGS", "TARGETS", "GscoreEngine", "GscoreModel",
    "MetaSets", "ModelSpec", "Pair", "check_disjoint", "confidence_baseline", "distance",
    "evaluate_gscore", "fit_gscore", "fit_line", "fit_lines", "fit_variant",
    "frechet_distance", "frechet_distances", "gbench_protocol", "gmm_params", "kmeans_pair",
    "pack", "parse_model", "parse_ratio", "partition_splits", "predict_gscore", "ratio_label",
    "search_tau", "set_sizes",
]
