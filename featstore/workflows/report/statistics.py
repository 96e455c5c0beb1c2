"""The report's statistics: intervals, paired tests and rankings (computed by scorers.stats
through scorers.uncertainty and scorers.compare), as tables and critical-difference figures.

- p-value matrices: for every OOD group, the Holm-adjusted p-values of the paired stratified
  bootstrap test of the group-mean AUROC for every pair of scorers; for every OOD split,
  DeLong's test of AUROC, Holm-adjusted (needs the scores: a report built from a store).
- rankings: mean rank of every scorer over the OOD test splits by AUROC and by FPR95, the
  Friedman test and Nemenyi's critical difference, drawn as a CD diagram (needs at least two
  OOD test splits and three scorers).

A section is drawn only where it can reach significance at its size (`significance`):
otherwise `statistics_notes` says why in one line. DeLong matrices show the first
`TOP_PAIRS` scorers of the leaderboard's order (their p-values Holm-adjusted over every pair).
"""

from __future__ import annotations

import math
from typing import Any

from featstore.workflows.report import plots
from featstore.workflows.report.collect import ReportData
from featstore.workflows.report.significance import bootstrap_note, cd_note, friedman_note
from scorers.compare import p_matrix

#: scorers shown in a DeLong p-value matrix (the leaderboard's first ones)
TOP_PAIRS = 8


def _bootstrap_resamples(data: ReportData) -> int:
    return int((data.result.get("ci") or {}).get("resamples", 0))


def statistics_notes(data: ReportData) -> list[str]:
    """One line per statistical section that cannot reach significance here, saying why."""
    notes = []
    tests = data.pairwise
    if tests and len(tests.get("methods", [])) >= 2:
        for g, t in tests["groups"].items():
            note = bootstrap_note(_bootstrap_resamples(data), len(t["bootstrap"]["auroc"]))
            if note is not None:
                notes.append(f"p-values, {g or '(no group)'} mean AUROC (paired bootstrap): "
                             f"{note}")
    for metric, r in data.rankings.items():
        k = len(r["mean_ranks"])
        for note in (friedman_note(k, r["n_blocks"]), cd_note(k, r["n_blocks"], r["alpha"])):
            if note is not None:
                notes.append(f"ranking by {metric}: {note}")
    return notes


def _p(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def p_value_tables(data: ReportData, table_cls: Any,
                   order: list[str] | None = None) -> list[Any]:
    """One table per group (paired bootstrap, AUROC) where a p below 0.05 is attainable, and
    per split (DeLong, AUROC) over the first TOP_PAIRS scorers of `order`."""
    tests = data.pairwise
    if not tests or len(tests.get("methods", [])) < 2:
        return []
    methods = tests["methods"]
    ci = data.result.get("ci") or {}
    out = []
    for g, t in tests["groups"].items():
        if bootstrap_note(_bootstrap_resamples(data), len(t["bootstrap"]["auroc"])):
            continue
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
    top = [m for m in (order or methods) if m in methods][:TOP_PAIRS]
    idx = [methods.index(m) for m in top]
    shown = (f"the first {len(top)} of {len(methods)} scorers in the leaderboard's order; "
             if len(top) < len(methods) else "")
    for s, t in tests["splits"].items():
        mat = p_matrix(methods, t["delong_auroc"])
        rows = [[m] + ["" if i == j else _p(mat[i, j]) for j in idx]
                for i, m in zip(idx, top, strict=True)]
        best = {(r, c + 1) for r, i in enumerate(idx) for c, j in enumerate(idx)
                if i != j and mat[i, j] < 0.05}
        out.append(table_cls(
            f"p-values, {s} AUROC: DeLong's test, Holm-adjusted over all "
            f"{len(t['delong_auroc'])} pairs ({shown}highlighted: p < 0.05)",
            ["scorer", *top], rows, best, f"delong-{s.replace('/', '_')}"))
    return out


def ranking_tables(data: ReportData, table_cls: Any) -> list[Any]:
    """Mean ranks by AUROC and FPR95 with Friedman's test and Nemenyi's CD."""
    if not data.rankings:
        return []
    metrics = list(data.rankings)
    first = data.rankings[metrics[0]]["mean_ranks"]
    methods = sorted(data.rankings[metrics[0]]["methods"], key=lambda m: (first[m], m))
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
    """A critical-difference diagram per ranking metric, where Nemenyi's CD can separate a
    pair (`significance.cd_note`)."""
    out = []
    for metric, r in data.rankings.items():
        if cd_note(len(r["mean_ranks"]), r["n_blocks"], r["alpha"]) is not None:
            continue
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
