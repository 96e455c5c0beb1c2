"""Confidence intervals on an evaluation: the bridge from a store's splits to scorers.stats.

``add_intervals(result, scores, store, spec)`` takes a result shaped like
``scorers.evaluate.evaluate``'s (``{"id_split", "id_acc", "methods": {name: {"splits":
{split: metrics}, "groups": {group: metrics}, "misclassification_auroc", ...}}}``) and the
scores behind it, runs the stratified bootstrap of ``scorers.stats.bootstrap`` once for every
method (the same resamples for all of them), and writes ``[lo, hi]`` beside every value:
``"<metric>_ci"`` next to ``"<metric>"`` in every split, group and pooled-group dict, next to
``misclassification_auroc``, ``aurc``, ``augrc`` of every method, and ``"id_acc_ci"`` next to
``"id_acc"``, plus ``result["ci"]``: the method echo (level, percentile/BCa, resamples, seed,
resampling). A value the bootstrap cannot define (e.g. no misclassified row) gets ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import StoreLike

from .stats.bootstrap import BootstrapSpec, Distributions, bootstrap_evaluation


def id_correctness(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(correct, labelled) boolean rows of an ID split: label != -1, argmax == label."""
    labels = np.asarray(labels)
    labelled = labels != -1
    correct = labelled & (np.argmax(np.asarray(logits), axis=1) == labels)
    return correct, labelled


def split_groups(store: StoreLike, ood_names: list[str]) -> dict[str, list[str]]:
    """``{group: [split, ...]}`` of the OOD splits, as ``scorers.evaluate.group_means``."""
    groups: dict[str, list[str]] = {}
    for name in ood_names:
        groups.setdefault(store.split(name).group or "", []).append(name)
    return groups


def _plain(iv: list[float]) -> list[float] | None:
    return None if any(math.isnan(v) for v in iv) else [float(v) for v in iv]


def _attach(target: dict[str, Any], intervals: Mapping[str, list[float]]) -> None:
    for key, iv in intervals.items():
        if key in target:
            target[f"{key}_ci"] = _plain(iv)


def add_intervals(result: dict[str, Any], scores: Mapping[str, Mapping[str, np.ndarray]],
                  store: StoreLike, spec: BootstrapSpec) -> Distributions:
    """Write the intervals into ``result`` (in place) and return the distributions.

    ``scores[method][split]`` must hold the ID split and every OOD split of each method in
    ``result["methods"]``; methods without scores are left without intervals."""
    id_name = result["id_split"]
    methods = {m: scores[m] for m in result["methods"] if m in scores}
    result["ci"] = spec.describe()
    if not methods:
        return Distributions(spec, np.full(spec.n_boot, np.nan))
    ood_names = list(next(iter(result["methods"].values()))["splits"])
    groups = split_groups(store, ood_names)
    id_split = store.split(id_name)
    correct, labelled = id_correctness(id_split.logits, id_split.labels)
    dist, iv = bootstrap_evaluation(spec, id_name, methods, groups, correct, labelled)
    if iv["id_acc"] is not None:
        result["id_acc_ci"] = _plain(iv["id_acc"])
    for m, entry in iv["methods"].items():
        target = result["methods"][m]
        for s, by_metric in entry["splits"].items():
            _attach(target["splits"][s], by_metric)
        for g, by_metric in entry["groups"].items():
            _attach(target["groups"][g], by_metric)
        for g, by_metric in entry.get("pooled", {}).items():
            if g in target.get("pooled", {}):
                _attach(target["pooled"][g], by_metric)
        _attach(target, entry["misc"])
        for key in ("misclassification_auroc", "aurc", "augrc"):
            if key in target and f"{key}_ci" not in target:
                target[f"{key}_ci"] = None
    return dist
