"""The report's statistics: intervals, paired tests and rankings (computed by scorers.stats
through scorers.uncertainty and scorers.compare), as tables and critical-difference figures.

- p-value matrices: for every OOD group, the Holm-adjusted p-values of the paired stratified
  bootstrap test of the group-mean AUROC for every pair of scorers; for every OOD split,
  DeLong's test of AUROC, Holm-adjusted (needs the scores: a report built from a store).
- rankings: mean rank of every scorer over the OOD test splits by AUROC and by FPR95, the
  Friedman test and Nemenyi's critical difference, drawn as a CD diagram (needs at least two
  OOD test splits and three scorers).
"""

from __future__ import annotations

import math
from typing import Any

from scorers.compare import p_matrix

from . import plots
from .collect import ReportData


def _p(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def p_value_tables(data: ReportData, table_cls: Any) -> list[Any]:
    """One table per group (paired bootstrap, AUROC) and per split (DeLong, AUROC)."""
    tests = data.pairwise
    if not tests or len(tests.get("methods", [])) < 2:
        return []
    methods = tests["methods"]
    ci = data.result.get("ci") or {}
    out = []
    for g, t in tests["groups"].items():
        mat = p_matrix(methods, t["bootstrap"]["auroc"])
        rows = [[m] + ["" if i == j else _p(mat[i, j]) for j in range(len(methods))]
                for i, m in enumerate(methods)]
        best = {(i, j + 1) for i in range(len(methods)) for j in range(len(methods))
                if i != j and mat[i, j] < 0.05}
        out.append(table_cls(
            f"p-values, {g or '(no group)'} mean AUROC: paired stratified bootstrap "
            f"({ci.get('resamples', '?')} common resamples), Holm-adjusted over "
            f"{len(t['bootstrap']['auroc'])} pairs (highlighted: p < 0.05; the smallest "
            f"unadjusted p {ci.get('resamples', 0)} resamples can show is "
            f"{_p(2 / (ci.get('resamples', 0) + 1))})",
            ["scorer", *methods], rows, best, f"pvalues-{g or 'all'}"))
    for s, t in tests["splits"].items():
        mat = p_matrix(methods, t["delong_auroc"])
        rows = [[m] + ["" if i == j else _p(mat[i, j]) for j in range(len(methods))]
                for i, m in enumerate(methods)]
        best = {(i, j + 1) for i in range(len(methods)) for j in range(len(methods))
                if i != j and mat[i, j] < 0.05}
        out.append(table_cls(
            f"p-values, {s} AUROC: DeLong's test, Holm-adjusted (highlighted: p < 0.05)",
            ["scorer", *methods], rows, best, f"delong-{s.replace('/', '_')}"))
    return out


def ranking_tables(data: ReportData, table_cls: Any) -> list[Any]:
    """Mean ranks by AUROC and FPR95 with Friedman's test and Nemenyi's CD."""
    if not data.rankings:
        return []
    metrics = list(data.rankings)
    methods = data.rankings[metrics[0]]["methods"]
    rows = [[m] + [f"{data.rankings[k]['mean_ranks'][m]:.2f}" for k in metrics]
            for m in methods]
    best = set()
    for j, k in enumerate(metrics):
        top = min(data.rankings[k]["mean_ranks"].values())
        best |= {(i, j + 1) for i, m in enumerate(methods)
                 if data.rankings[k]["mean_ranks"][m] == top}
    notes = "; ".join(
        f"{k}: Friedman chi2 {r['friedman_chi2']:.2f}, p {_p(r['friedman_p'])}, Nemenyi CD "
        f"{r['critical_difference']:.2f}" for k, r in data.rankings.items())
    n = data.rankings[metrics[0]]["n_blocks"]
    return [table_cls(f"Mean rank over {n} OOD test splits (1 = best; {notes})",
                      ["scorer", *[f"rank by {k}" for k in metrics]], rows, best, "ranking")]


def cd_figures(data: ReportData, figure_cls: Any) -> list[Any]:
    out = []
    for metric, r in data.rankings.items():
        caption = (f"critical-difference diagram, {metric}: mean ranks over {r['n_blocks']} OOD "
                   f"test splits; bars join scorers within Nemenyi's CD "
                   f"({r['critical_difference']:.2f}, alpha {r['alpha']}); Friedman p "
                   f"{_p(r['friedman_p'])}")
        out.append(figure_cls("Rankings", caption,
                              plots.cd_figure(f"Critical difference · {metric}",
                                              r["mean_ranks"], r["critical_difference"],
                                              r["cliques"]),
                              f"cd_{metric}"))
    return out
