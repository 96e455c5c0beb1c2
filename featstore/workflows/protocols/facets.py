"""FACETS' results layout (Recalcati, Garcea, Piano, Lamberti & Morra, DSAA 2023, Tables VI
and VII): per dataset (a store: e.g. the WordNet T40 / T45 / T50 or tier T1 / T2 assignments
of `featstore protocol wordnet|tiers`, each extracted into its own store) and OOD group, per
method, the cell "FPR@95%TPR / Detection Error / AUROC" (percent; `scorers.metrics`), and the
misclassification-detection row of each dataset's ID test split (Table VII;
`scorers.misclassification`, with its warning under 20 errors). The best value of each metric
per row is marked (lowest FPR and detection error, highest AUROC; ties all marked, as the
paper). Methods a store cannot score are listed with the reason, never dropped silently.

As the paper computes them: "Detection Error" is `detection_error_tpr95` = 0.5 (1 - 0.95) +
0.5 FPR@95%TPR (every Table VI/VII cell but OODL's follows it; the min-over-thresholds
`detection_error` of ODIN is kept in each cell's JSON beside it, not printed). The columns carry
the paper's method names (`PAPER_NAMES`): MSP = `msp`; TS = `odin` at T = 1000 without input
perturbation (the paper cites ODIN [21] for TS, and its TS column tracks MLV, as softmax at
T = 1000 does); MLV = `mls`; ODIN = `odin_perturbed`; IP TS MLV = `ip_ts_mlv`; OODL = `oodl`.
A method outside the map is labelled with its scorer name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.store.fileio import atomic_write_output
from featstore.store.interfaces import StoreLike
from scorers.evaluate import evaluate

CELL_METRICS = (("fpr95", "min"), ("detection_error_tpr95", "min"), ("auroc", "max"))
#: Also kept in each cell's JSON (not printed): ODIN's min-over-thresholds detection error.
EXTRA_CELL_KEYS = ("detection_error",)
#: The paper's columns, in its order: scorer name -> Table VI's method name.
PAPER_NAMES: dict[str, str] = {"msp": "MSP", "odin": "TS", "mls": "MLV",
                               "odin_perturbed": "ODIN", "ip_ts_mlv": "IP TS MLV",
                               "oodl": "OODL"}
#: TS is softmax at ODIN's temperature, T = 1000 (Liang et al. 2018), without perturbation.
PAPER_PARAMS: dict[str, dict[str, Any]] = {"odin": {"temperature": 1000.0}}
_KEYS = tuple(k for k, _ in CELL_METRICS) + EXTRA_CELL_KEYS


def column_label(method: str) -> str:
    """The paper's name of a scorer's column (`PAPER_NAMES`), else the scorer name."""
    return PAPER_NAMES.get(method, method)


def facets_params(methods: Sequence[str],
                  params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The parameters each method runs with: `PAPER_PARAMS` overridden by `params` (methods
    at their defaults left out)."""
    used = {m: {**PAPER_PARAMS.get(m, {}), **dict((params or {}).get(m, {}))}
            for m in methods}
    return {m: p for m, p in used.items() if p}


def facets_table(stores: Sequence[tuple[str, Any]], methods: Sequence[str],
                 params: Mapping[str, Mapping[str, Any]] | None = None,
                 use_cache: bool = True) -> dict[str, Any]:
    """{"methods", "labels": {method: paper name}, "params", "rows": [{"dataset", "kind"
    ("ood" | "misclassification"), "group", "cells": {method: {fpr95, detection_error_tpr95,
    auroc, detection_error} | None}, "best": {metric: [methods]}, "warnings": {method:
    text}}], "skipped": {dataset: {method: reason}}}. `params` override `PAPER_PARAMS`.
    Each store's rows are `facets_dataset`'s (independent: an executor may run them apart,
    `featstore.workflows.experiments.workflows`), put together by `assemble_table`."""
    used = facets_params(methods, params)
    return assemble_table(methods, used, [(label, *facets_dataset(label, store, methods, used,
                                                                  use_cache))
                                          for label, store in stores])


def facets_dataset(label: str, store: StoreLike, methods: Sequence[str],
                   used: Mapping[str, Mapping[str, Any]], use_cache: bool = True
                   ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One store's rows of the table (its OOD groups, then its misclassification row) and
    the methods it could not score ({method: reason})."""
    rows: list[dict[str, Any]] = []
    res = evaluate(store, list(methods), dict(used), use_cache=use_cache)
    scored = res["methods"]
    groups: list[str] = []
    for m in scored.values():
        groups += [g for g in m["groups"] if g not in groups]
    for g in groups:
        cells = {m: ({k: scored[m]["groups"][g][k] for k in _KEYS}
                     if m in scored else None) for m in methods}
        rows.append({"dataset": label, "kind": "ood", "group": g, "cells": cells,
                     "best": _best(cells), "warnings": {}})
    cells, warnings = {}, {}
    for m in methods:
        mis = scored.get(m, {}).get("misclassification")
        cells[m] = ({k: mis[k] for k in _KEYS} if mis else None)
        if mis and mis.get("warning"):
            warnings[m] = mis["warning"]
        elif m in scored and not mis:
            warnings[m] = "misclassification metrics undefined (no error or no correct row)"
    rows.append({"dataset": label, "kind": "misclassification", "group": "id/test",
                 "cells": cells, "best": _best(cells), "warnings": warnings})
    return rows, dict(res["skipped"] or {})


def assemble_table(methods: Sequence[str], used: Mapping[str, Any],
                   parts: Sequence[tuple[str, list[dict[str, Any]], Mapping[str, str]]]
                   ) -> dict[str, Any]:
    """The table of `facets_table` from each dataset's (label, rows, skipped), in order."""
    rows = [r for _, part_rows, _ in parts for r in part_rows]
    skipped = {label: dict(sk) for label, _, sk in parts if sk}
    return {"methods": list(methods), "labels": {m: column_label(m) for m in methods},
            "params": dict(used), "rows": rows, "skipped": skipped}


def _best(cells: Mapping[str, Mapping[str, float] | None]) -> dict[str, list[str]]:
    out = {}
    for key, better in CELL_METRICS:
        vals = {m: c[key] for m, c in cells.items() if c is not None}
        if vals:
            top = max(vals.values()) if better == "max" else min(vals.values())
            out[key] = [m for m, v in vals.items() if v == top]
    return out


def cell_text(cell: Mapping[str, float] | None, best: Mapping[str, list[str]], method: str,
              mark: tuple[str, str]) -> str:
    """'FPR / DetErr / AUROC' with the best values wrapped in `mark` (open, close)."""
    if cell is None:
        return "–"
    parts = []
    for key, _ in CELL_METRICS:
        text = f"{cell[key]:.2f}"
        parts.append(f"{mark[0]}{text}{mark[1]}" if method in best.get(key, []) else text)
    return " / ".join(parts)


def markdown_table(table: dict[str, Any]) -> str:
    """The table as Markdown (best values bold), then warnings and skipped methods."""
    methods = table["methods"]
    lines = ["# FACETS layout: FPR@95%TPR ↓ / Detection Error ↓ / AUROC ↑ (in %)", "",
             "| dataset | rows | " + " | ".join(column_label(m) for m in methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for r in table["rows"]:
        what = ("misclassification (id/test)" if r["kind"] == "misclassification"
                else f"OOD {r['group']}")
        lines.append(f"| {r['dataset']} | {what} | " + " | ".join(
            cell_text(r["cells"][m], r["best"], m, ("**", "**")) for m in methods) + " |")
    notes = [f"- {r['dataset']} {m}: {w}" for r in table["rows"]
             for m, w in r["warnings"].items()]
    notes += [f"- {d} {m}: skipped ({why})" for d, ms in table["skipped"].items()
              for m, why in ms.items()]
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines) + "\n"


def write_markdown_table(path: Path, table: dict[str, Any]) -> Path:
    """Write `markdown_table(table)` to `path` (its folder created), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_output(path, markdown_table(table))
