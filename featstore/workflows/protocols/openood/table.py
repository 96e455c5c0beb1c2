"""OpenOOD's metrics table from a featstore evaluation.

OpenOOD's `Evaluator.eval_ood` (openood/evaluation_api/evaluator.py, commit
3c35632ee91b54b09d1f085d04f94744cece7d0b) returns, per method, one row per near-OOD dataset,
then `nearood` (their unweighted mean), one row per far-OOD dataset, then `farood`; columns
`FPR@95, AUROC, AUPR_IN, AUPR_OUT, ACC` in percent; `scripts/eval_ood_imagenet.py` writes it
as `<root>/ood/<method>.csv` (`fsood/` for full-spectrum) with `float_format='{:.2f}'`.
The columns are featstore's metrics (scorers.metrics, docs/statistics.md):

- FPR@95 = `fpr95_ood` (OpenOOD's positive class is OOD: the share of ID samples rejected at
  the threshold that catches 95% of the OOD samples), never featstore's `fpr95`;
- AUROC = `auroc`; AUPR_IN = `aupr_in` (ID positive, score as is); AUPR_OUT = `aupr_out`
  (OOD positive, -score), both trapezoid areas as OpenOOD's `metrics.auc(recall, precision)`;
- ACC = top-1 accuracy of id/test (full-spectrum: of id/test and the csid sets together).

`method_rows` builds the rows (with featstore's bootstrap interval beside each value where the
evaluation carries one), `ood_csv` OpenOOD's file, `intervals_csv` its intervals beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

COLUMNS = ("FPR@95", "AUROC", "AUPR_IN", "AUPR_OUT", "ACC")
#: OpenOOD column -> featstore metric key
METRIC_OF = {"FPR@95": "fpr95_ood", "AUROC": "auroc", "AUPR_IN": "aupr_in",
             "AUPR_OUT": "aupr_out"}
GROUP_ROW = {"near": "nearood", "far": "farood"}


def method_rows(entry: Mapping[str, Any], groups: Mapping[str, Sequence[str]],
                acc: float | None, acc_ci: Sequence[float] | None = None
                ) -> list[dict[str, Any]]:
    """OpenOOD's rows of one method: `entry` is one method of an evaluation (its "splits"
    keyed `ood/<group>/<dataset>`, its "groups"), `groups` the benchmark's {near|far:
    [datasets]} in OpenOOD's order. Each row: {"row", "<column>": value, "<column>_ci":
    [lo, hi] | None}."""
    rows: list[dict[str, Any]] = []

    def row(name: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"row": name}
        for col, key in METRIC_OF.items():
            out[col] = metrics.get(key)
            out[f"{col}_ci"] = metrics.get(f"{key}_ci")
        out["ACC"], out["ACC_ci"] = acc, list(acc_ci) if acc_ci else None
        return out

    for group in ("near", "far"):
        for dataset in groups.get(group, []):
            metrics = entry["splits"].get(f"ood/{group}/{dataset}")
            if metrics is not None:
                rows.append(row(dataset, metrics))
        if group in entry["groups"]:
            rows.append(row(GROUP_ROW[group], entry["groups"][group]))
    return rows


def ood_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """OpenOOD's `<method>.csv`: header `,FPR@95,AUROC,AUPR_IN,AUPR_OUT,ACC`, a row per
    dataset and group mean, two decimals (pandas `to_csv(float_format='{:.2f}'.format)`); a
    missing value is empty, as pandas writes NaN."""
    lines = ["," + ",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join([r["row"], *("" if r[c] is None else f"{float(r[c]):.2f}"
                                           for c in COLUMNS)]))
    return "\n".join(lines) + "\n"


def intervals_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """featstore's intervals of the same cells: `<column>_lo,<column>_hi` per column."""
    head = [f"{c}_{end}" for c in COLUMNS for end in ("lo", "hi")]
    lines = ["," + ",".join(head)]
    for r in rows:
        cells = []
        for c in COLUMNS:
            ci = r.get(f"{c}_ci")
            cells += ["", ""] if not ci or ci[0] is None else [f"{ci[0]:.2f}", f"{ci[1]:.2f}"]
        lines.append(",".join([r["row"], *cells]))
    return "\n".join(lines) + "\n"


def summary_row(method: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One method of an evaluation as near / far AUROC and OpenOOD's FPR@95 (`fpr95_ood`),
    each with its interval, and the setting (`params`, `chosen` when tuned)."""
    row: dict[str, Any] = {"method": method, "params": entry.get("params"),
                           "chosen": entry.get("chosen")}
    for group in ("near", "far"):
        metrics = entry["groups"].get(group, {})
        for key, metric in (("auroc", "auroc"), ("fpr95", "fpr95_ood")):
            row[f"{group}_{key}"] = metrics.get(metric)
            row[f"{group}_{key}_ci"] = metrics.get(f"{metric}_ci")
    return row
