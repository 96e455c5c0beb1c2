"""The report's first screen: the leaderboard ranked by a group's AUROC, a best-per-group
summary line and the rows of every evaluated split.

Ranking (`rank_by`): "mean" (default) ranks by the unweighted mean of the `near` and `far`
group AUROCs when both exist, else of every group's; a group name ranks by that group's
AUROC. Scorers without a value sort last. Cells are one line: `value±h`, h = half the width
of the bootstrap interval ((hi - lo) / 2); the bounds are in the per-split table's JSON and
the Markdown twin keeps them.
"""

from __future__ import annotations

import math
from typing import Any

from featstore.errors import UsageError
from featstore.store.formatting import METRIC_HEADER, compact

METRICS = (("auroc", METRIC_HEADER["auroc"], max), ("fpr95", METRIC_HEADER["fpr95"], min))
EXTRA = (("misclassification_auroc", METRIC_HEADER["misclassification_auroc"], max),
         ("aurc", METRIC_HEADER["aurc"], min), ("augrc", METRIC_HEADER["augrc"], min))


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not math.isnan(float(v)) else math.nan


def groups_of(result: dict[str, Any]) -> list[str]:
    """OOD groups, near first, far second, then the others by name."""
    found = {g for r in result["methods"].values() for g in r["groups"]}
    order = [g for g in ("near", "far") if g in found]
    return order + sorted(found - set(order))


def rank_values(result: dict[str, Any], rank_by: str = "mean") -> tuple[str, dict[str, float]]:
    """(label, {scorer: value}) of the ranking criterion (module docstring)."""
    groups = groups_of(result)
    if rank_by == "mean":
        used: list[str] = [g for g in ("near", "far") if g in groups]
        used = used if len(used) == 2 else groups
        label = f"mean AUROC↑ ({', '.join(used)})" if len(used) > 1 else f"{used[0]} AUROC↑"
    elif rank_by in groups:
        used, label = [rank_by], f"{rank_by} AUROC↑"
    else:
        raise UsageError(f"--rank-by {rank_by!r}: expected 'mean' or an OOD group of this "
                         f"result ({', '.join(groups)})")
    values = {}
    for name, r in result["methods"].items():
        got = [_num(r["groups"].get(g, {}).get("auroc")) for g in used]
        values[name] = math.nan if any(math.isnan(v) for v in got) else sum(got) / len(got)
    return label, values


def ranked(result: dict[str, Any], rank_by: str = "mean") -> list[str]:
    """Scorer names, best first by the criterion (ties and missing values by name)."""
    _, values = rank_values(result, rank_by)
    return sorted(values, key=lambda m: (math.isnan(values[m]), -values[m]
                                         if not math.isnan(values[m]) else 0.0, m))


def leaderboard(result: dict[str, Any], rank_by: str = "mean") -> tuple[list[str],
                                                                         list[list[str]],
                                                                         set[tuple[int, int]]]:
    """(header, rows, best cells): `#`, scorer, the ranking value, per group AUROC and FPR95,
    then misclassification AUROC, AURC and AUGRC (columns that are empty for every scorer
    are left out)."""
    label, values = rank_values(result, rank_by)
    order = ranked(result, rank_by)
    methods = result["methods"]
    groups = groups_of(result)
    columns: list[tuple[str, list[float], list[str], Any]] = [
        (label, [values[m] for m in order], [compact(values[m]) for m in order], max)]
    for g in groups:
        for key, head, fn in METRICS:
            cells = [methods[m]["groups"].get(g, {}) for m in order]
            columns.append((f"{g} {head}", [_num(c.get(key)) for c in cells],
                            [compact(c.get(key), c.get(f"{key}_ci")) for c in cells], fn))
    for key, head, fn in EXTRA:
        raw = [_num(methods[m].get(key)) for m in order]
        if all(math.isnan(v) for v in raw):
            continue
        columns.append((head, raw, [compact(methods[m].get(key), methods[m].get(f"{key}_ci"))
                                    for m in order], fn))
    header = ["#", "scorer", *[c[0] for c in columns]]
    rows = [[str(i + 1), m, *[c[2][i] for c in columns]] for i, m in enumerate(order)]
    best: set[tuple[int, int]] = set()
    for j, (_, raw, _, fn) in enumerate(columns):
        finite = [v for v in raw if not math.isnan(v)]
        if finite:
            target = fn(finite)
            best |= {(i, j + 2) for i, v in enumerate(raw) if v == target}
    return header, rows, best


def summary_line(result: dict[str, Any], rank_by: str = "mean") -> str:
    """'Best: near AUROC knn 98.1 · far AUROC dice 100.0 · overall (mean AUROC) knn 99.0 ·
    ID accuracy 94.3% on id/test'."""
    parts = []
    methods = result["methods"]
    for g in groups_of(result):
        vals = {m: _num(r["groups"].get(g, {}).get("auroc")) for m, r in methods.items()}
        vals = {m: v for m, v in vals.items() if not math.isnan(v)}
        if vals:
            top = max(vals.values())
            names = sorted(m for m, v in vals.items() if v == top)
            parts.append(f"{g} AUROC: {', '.join(names)} {top:.1f}")
    label, values = rank_values(result, rank_by)
    order = ranked(result, rank_by)
    if order and not math.isnan(values[order[0]]):
        parts.append(f"ranked by {label.replace('↑', '')}: {order[0]} {values[order[0]]:.1f}")
    acc = _num(result.get("id_acc"))
    if not math.isnan(acc):
        parts.append(f"ID accuracy {acc:.1f}% on {result.get('id_split', 'id/test')}")
    return "Best " + " · ".join(parts) if parts else "no scorer has a value"


def rows_line(rows: dict[str, int]) -> str:
    """'Rows: id/test 300 · ood/near/blend 250 · ...' (the evaluated splits)."""
    if not rows:
        return "Rows per split: not known (the report was built from a results JSON whose store "\
               "is not at hand)"
    return "Rows: " + " · ".join(f"{name} {n:,}" for name, n in rows.items())
