"""Paired comparisons of scorers on the same rows, and rankings across many OOD sets.

``compare(store, methods)`` evaluates the methods once (``scorers.evaluate``), bootstraps them
on common stratified resamples (``scorers.stats.bootstrap``) and tests every pair:

- per OOD test split, AUROC: DeLong's test (``scorers.stats.delong``, fast midrank form);
- per OOD test split and per group mean, every metric of ``TESTED_METRICS``: the paired
  bootstrap test (``scorers.stats.paired``) on the common resamples, with the percentile
  interval of the difference ``a - b``;
- Holm's correction across the pairs, separately for each (split or group, metric, test).

``rank_results(results, metric)`` ranks the methods of one or more evaluation results (from
``scorers.evaluate.evaluate`` / ``featstore eval --out``: several seeds or stores) over every
(result, OOD test split) block: average ranks, Friedman, Nemenyi (``scorers.stats.ranking``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError, UsageError
from featstore.store.interfaces import StoreLike

from .evaluate import evaluate
from .metrics import METRIC_DIRECTIONS, OOD_METRIC_NAMES
from .registry import resolve_methods
from .results import ComparisonResult, EvaluationResult, eval_json_problem
from .stats.bootstrap import BootstrapSpec, Distributions
from .stats.delong import delong_test
from .stats.intervals import percentile_interval
from .stats.paired import holm, paired_bootstrap_p
from .stats.ranking import rank_methods
from .uncertainty import add_intervals

#: The metrics the paired bootstrap tests by default.
TESTED_METRICS = ("auroc", "fpr95", "fpr95_ood", "aupr_in", "aupr_out", "detection_error")


def _bootstrap_pairs(methods: Sequence[str], dists: Mapping[str, np.ndarray],
                     values: Mapping[str, float], metric: str, level: float) -> list[dict]:
    col = OOD_METRIC_NAMES.index(metric)
    rows = []
    for a, b in combinations(methods, 2):
        d = dists[a][:, col] - dists[b][:, col]
        lo, hi = percentile_interval(d[:, None], level)[0]
        rows.append({"a": a, "b": b, "value_a": values[a], "value_b": values[b],
                     "diff": values[a] - values[b], "diff_ci": [float(lo), float(hi)],
                     "p": paired_bootstrap_p(dists[a][:, col], dists[b][:, col])})
    for row, adj in zip(rows, holm(np.array([r["p"] for r in rows])), strict=True):
        row["p_holm"] = float(adj)
    return rows


def pairwise_tests(result: Mapping[str, Any], scores: Mapping[str, Mapping[str, np.ndarray]],
                   dist: Distributions, metrics: Sequence[str] = TESTED_METRICS
                   ) -> dict[str, Any]:
    """Every pair of ``result``'s methods: DeLong per split, paired bootstrap per split and
    group, Holm-adjusted. ``dist`` holds the methods' distributions on common resamples."""
    methods = [m for m in result["methods"] if m in dist.splits]
    id_name = result["id_split"]
    level = dist.spec.level
    out: dict[str, Any] = {"methods": methods, "splits": {}, "groups": {}}
    if len(methods) < 2:
        return out
    first = result["methods"][methods[0]]
    for s in first["splits"]:
        delong = []
        for a, b in combinations(methods, 2):
            r = delong_test(scores[a][id_name], scores[a][s], scores[b][id_name], scores[b][s])
            delong.append({"a": a, "b": b, "auroc_a": 100 * float(r.aucs[0]),
                           "auroc_b": 100 * float(r.aucs[1]), "z": r.z, "p": r.p_value})
        for row, adj in zip(delong, holm(np.array([r["p"] for r in delong])), strict=True):
            row["p_holm"] = float(adj)
        out["splits"][s] = {
            "delong_auroc": delong,
            "bootstrap": {m: _bootstrap_pairs(
                methods, {k: dist.splits[k][s] for k in methods},
                {k: result["methods"][k]["splits"][s][m] for k in methods}, m, level)
                for m in metrics}}
    for g in first["groups"]:
        out["groups"][g] = {"bootstrap": {m: _bootstrap_pairs(
            methods, {k: dist.groups[k][g] for k in methods},
            {k: result["methods"][k]["groups"][g][m] for k in methods}, m, level)
            for m in metrics}}
    return out


def p_matrix(methods: Sequence[str], rows: Sequence[Mapping[str, Any]],
             key: str = "p_holm") -> np.ndarray:
    """(k, k) symmetric matrix of ``key`` from pair rows ``{"a", "b", key}``; diagonal NaN."""
    index = {m: i for i, m in enumerate(methods)}
    mat = np.full((len(methods), len(methods)), np.nan)
    for r in rows:
        i, j = index[r["a"]], index[r["b"]]
        mat[i, j] = mat[j, i] = r[key]
    return mat


def compare(store: StoreLike, methods: Sequence[Any],
            params: Mapping[str, Mapping[str, Any]] | None = None,
            spec: BootstrapSpec | None = None, use_cache: bool = True,
            metrics: Sequence[str] = TESTED_METRICS) -> ComparisonResult:
    """Evaluate ``methods`` (at least two; names, ``module:Class``, Scorer classes or
    instances, as ``evaluate`` takes them) and test every pair; see the module docstring.

    Returns a `scorers.results.ComparisonResult` (a read-only dict too): {"store",
    "id_split", "methods", "ci" (the bootstrap echo), "evaluation" (the
    evaluate result with intervals), "splits": {split: {"delong_auroc": [pair], "bootstrap":
    {metric: [pair]}}}, "groups": {group: {"bootstrap": {metric: [pair]}}}, "skipped"}; a pair
    row is {"a", "b", values, "diff", "diff_ci", "p", "p_holm"} (DeLong: "auroc_a",
    "auroc_b", "z", "p", "p_holm")."""
    methods, params = resolve_methods(methods, params)
    if len(methods) < 2:
        raise UsageError(f"compare needs at least two different methods, got {len(methods)}")
    for m in metrics:
        if m not in OOD_METRIC_NAMES:
            raise UsageError(f"unknown metric {m!r} (valid: {', '.join(OOD_METRIC_NAMES)})")
    spec = spec or BootstrapSpec()
    scores: dict[str, dict[str, np.ndarray]] = {}
    # a plain copy: the intervals are written into it (the returned evaluation is frozen)
    result = dict(evaluate(store, methods, params, use_cache, keep_scores=scores))
    dist = add_intervals(result, scores, store, spec)
    tests = pairwise_tests(result, scores, dist, metrics)
    if len(tests["methods"]) < 2:
        raise UsageError("compare: fewer than two of the methods could run on this store "
                         f"(skipped: {result['skipped']})")
    return ComparisonResult(
        store=str(store.path), id_split=result["id_split"], methods=tests["methods"],
        ci=result["ci"], evaluation=EvaluationResult(**result), splits=tests["splits"],
        groups=tests["groups"], skipped=result["skipped"])


def read_results(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The evaluation results written by `featstore eval --out` (JSON objects with "methods"
    and "ood_splits"), in order; InputError naming the first file that is unreadable, not
    JSON, or not such a result."""
    loaded = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"rank: {str(path)!r} is not a results JSON ({exc})") from None
        if not isinstance(data, dict) or "methods" not in data or "ood_splits" not in data:
            raise InputError(f"rank: {str(path)!r} has no 'methods'/'ood_splits'; expected "
                             "the JSON written by `featstore eval --out`")
        problem = eval_json_problem(data)
        if problem:
            raise InputError(f"rank: {str(path)!r}: {problem} (expected the JSON written by "
                             "`featstore eval --out`)")
        loaded.append(data)
    return loaded


def rank_results(results: Sequence[Mapping[str, Any]], metric: str = "auroc",
                 alpha: float = 0.05) -> dict[str, Any]:
    """Average ranks, Friedman and Nemenyi of the methods common to every result, over every
    (result, OOD test split) block; ``metric``'s direction from ``METRIC_DIRECTIONS``."""
    if metric not in OOD_METRIC_NAMES:
        raise UsageError(f"unknown metric {metric!r} (valid: {', '.join(OOD_METRIC_NAMES)})")
    if not results:
        raise UsageError("ranking needs at least one evaluation result")
    methods = [m for m in results[0]["methods"]
               if all(m in r["methods"] for r in results[1:])]
    blocks, rows = [], []
    for k, r in enumerate(results):
        for s in r["ood_splits"]:
            if all(s in r["methods"][m]["splits"] for m in methods):
                blocks.append(f"{k}:{s}" if len(results) > 1 else s)
                rows.append([r["methods"][m]["splits"][s][metric] for m in methods])
    ranking = rank_methods(np.array(rows, dtype=np.float64).reshape(len(rows), len(methods)),
                           methods, METRIC_DIRECTIONS[metric], alpha)
    return {"metric": metric, "direction": METRIC_DIRECTIONS[metric], "blocks": blocks,
            "post_hoc": "Nemenyi", **ranking.to_json()}
